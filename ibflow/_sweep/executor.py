"""The compiled, vmapped, sharded batch runner of a sweep."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .. import _checks
from .._integrate import integrate
from .._models.base import AbstractPredictorModel
from .._trace_cache import TraceCache


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counted by tests: one trace per build
def _integrate_batch(build, options, option_axes, references, has_test, params, X, y, X_test,
                     y_test, refs):
    """The compiled per-round computation, vmapped over members. Module-level so that repeated
    sweeps with the same `build` (compared by identity, or by value for an Equinox module) and the
    same static options reuse one compilation; float options arrive as traced arrays."""

    def one(p):
        model = build(**{k: v for k, v in p.items() if k not in option_axes})
        member_options = {k: v for k, v in p.items() if k in option_axes}
        sol = integrate(model, X, y, throw=False, **options, **member_options)
        trained, _ = ravel_pytree(eqx.filter(sol.model, eqx.is_inexact_array))
        record = {"loss": sol.loss, "steps": sol.steps, "time": sol.time,
                  "status": sol.status._value, "parameters": trained}
        if sol.kinks is not None:  # piecewise-linear models: per-member event counts
            record |= {"switches": sol.kinks.switches, "slides": sol.kinks.slides,
                       "sliding_time": sol.kinks.sliding_time}
        if has_test:  # the model's own outputs: right for any model, linear or not
            record["test_error"] = jnp.mean((jax.vmap(sol.model)(X_test) - y_test) ** 2)
        if isinstance(sol.model, AbstractPredictorModel):
            w = sol.model.predictor()
            record["predictor"] = w
            for name in references:
                record[f"distance_{name}"] = (jnp.linalg.norm(w - refs[name])
                                              / jnp.linalg.norm(refs[name]))
        return record

    return jax.vmap(one)(params)


def traced_options(options: dict, sweepable: tuple[str, ...]) -> dict:
    """Python floats given for sweepable options become float64 arrays, so that sweeps
    differing only in, e.g., ``rtol`` reuse one compilation; everything else (Modules, ints like
    ``max_steps``) is passed unchanged."""
    def convert(name, value):
        scalar = isinstance(value, (float, np.floating))
        return jnp.asarray(value, dtype=float) if scalar and name in sweepable else value

    return {k: convert(k, v) for k, v in options.items()}


class Executor:
    """Runs rounds of chunks: one chunk per device, the member axis sharded over the mesh
    (GSPMD partitions the vmapped solve; data and references are replicated). shard_map would
    give each device its own while loop, but lineax's linear solves inside the implicit phase do
    not trace under it in this JAX."""

    def __init__(self, build: Callable, options: dict, sweepable: tuple[str, ...],
                 option_axes: tuple[str, ...], references: tuple[str, ...], has_test: bool,
                 devices):
        self.build, self.options = build, traced_options(options, sweepable)
        self.option_axes, self.references, self.has_test = option_axes, references, has_test
        mesh = Mesh(np.array(devices), ("members",))
        self.n_devices = len(devices)
        self._members = NamedSharding(mesh, PartitionSpec("members"))
        self._replicated = NamedSharding(mesh, PartitionSpec())
        self._batch = TraceCache("ibflow.sweep batch", _integrate_batch, self.build, self.options,
                                 self.option_axes, self.references, self.has_test)

    def place(self, dataset: dict[str, np.ndarray], refs: dict[str, np.ndarray]) -> tuple:
        """One data set and its references on every device: copied once per data set, and
        passed to `run` for each of its chunks (X of the Figure 7.1 grid: 800 kB, 13 chunks)."""
        d = dataset["X"].shape[1]
        X_test = dataset.get("X_test", np.zeros((1, d)))
        y_test = dataset.get("y_test", np.zeros(1))
        return jax.device_put((dataset["X"], dataset["y"], X_test, y_test, dict(refs)),
                              self._replicated)

    def run(self, params: dict[str, np.ndarray], placed: tuple) -> dict[str, np.ndarray]:
        """Integrate the members ``params`` (one flat array per axis) on a data set placed by
        `place`."""
        # device_put, not jnp.asarray: that compiles a conversion program per shape and dtype.
        params = jax.device_put({k: np.asarray(v) for k, v in params.items()}, self._members)
        with _checks.traced_errors_as_nan():  # no host callbacks: cacheable across processes
            out = self._batch(params, *placed)
        return {k: np.asarray(v) for k, v in out.items()}
