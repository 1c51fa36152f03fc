"""The compiled, vmapped, sharded batch runner of a sweep."""

import inspect
import os
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .. import _checks
from .._integrate import integrate
from .._lapack import CONCURRENT_LAPACK_ELEMENTS, largest_batched_lapack_call
from .._models.base import AbstractPredictorModel
from .._status import Status
from .plan import DATA_AXIS

#: The step budget of a chunk's first pass (`Executor.run`): members that exhaust it are run
#: again, with the sweep's own budget, in a second and smaller batch, so that a few slow members
#: do not hold the whole chunk in lockstep. A few more than the typical count of the default
#: Newton tail (1–6 iterations per member on the Figure 7.1 grid, 3 on average); for a model
#: whose members all need more steps, the first pass costs at most this many steps of the chunk,
#: and the executor stops making it after such a chunk.
FIRST_PASS_STEPS = 8
#: Chunks with fewer members run in one pass: the second batch would be too small to pay for
#: the first pass and its own compilation.
SPLIT_MIN_MEMBERS = 16
_BUDGET_EXHAUSTED = int(Status.budget_exhausted._value)
#: At most this many chunks in flight at once on a CPU (`Executor.concurrency`; see
#: `_chunks_beside`).
MAX_CONCURRENT_CHUNKS = 8


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counted by tests: one trace per build
def _integrate_batch(build, options, option_axes, build_axes, paired, references, has_test,
                     params, *data):
    """The compiled per-round computation, vmapped over members. Module-level so that repeated
    sweeps with the same `build` (compared by identity, or by value for an Equinox module) and the
    same static options reuse one compilation; float options arrive as traced arrays. `data`:
    ``(X, y, X_test, y_test, refs)`` shared by the members or, where `paired`, stacked over the
    data sets, each member reading the one its `DATA_AXIS` value names."""

    def one(p):
        X, y, X_test, y_test, refs = (jax.tree_util.tree_map(lambda a: a[p[DATA_AXIS]], data)
                                      if paired else data)
        model = build(**{k: v for k, v in p.items() if k in build_axes})
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


def _second_batch_size(count: int, size: int, n_devices: int) -> int:
    """The batch for `count` members run again from a chunk of `size`: the smallest of size,
    size/4, size/16, … (rounded up to multiples of `n_devices`) that holds them. A few fixed
    sizes per chunk size, so that second passes compile a bounded number of programs."""
    best = candidate = size
    while True:
        candidate = -(-candidate // 4)
        candidate = -(-candidate // n_devices) * n_devices
        if candidate < count or candidate >= best:
            return best
        best = candidate


class Executor:
    """Runs rounds of chunks: one chunk per device, the member axis sharded over the mesh
    (GSPMD partitions the vmapped solve; data and references are replicated). shard_map would
    give each device its own while loop, but lineax's linear solves inside the implicit phase do
    not trace under it in this JAX.

    Members of one vmapped batch run in lockstep until the slowest finishes. A chunk of at least
    `split_min_members` members therefore runs in two passes (`run`): first with a budget of
    `first_pass_steps` steps, then the members that exhausted it, from the start, with the
    sweep's budget (``max_steps``) as a smaller batch (`_second_batch_size`), unless `one_pass`
    is set: where the flows' batch `compacts` (its stragglers continue in a smaller batch inside
    the compiled solve; a second pass would only restart them from the start), or where every
    member takes far more than `first_pass_steps` (flows through kinks: thousands of steps; a
    first pass would only compile and run a second program). A member finished in the first pass
    has the record it would have with the full budget (its solve does not depend on the budget
    it did not reach); a member that exhausts the full budget in the second pass reports
    ``budget_exhausted``, as in one pass. `second_pass_counts` lists, per `run`, the members run
    again (0 for a chunk run in one pass). On a CPU, `run` may be called from several threads
    at once, as many as `decide_concurrency` allows."""

    def __init__(self, build: Callable, options: dict, sweepable: tuple[str, ...],
                 option_axes: tuple[str, ...], references: tuple[str, ...], has_test: bool,
                 devices, *, first_pass_steps: int | None = None,
                 split_min_members: int | None = None, one_pass: bool = False,
                 build_axes: tuple[str, ...] | None = None, paired: bool = False):
        self.build, self.options = build, traced_options(options, sweepable)
        # `build_axes` None: every axis that is not an option; `paired`: the data placed are
        # stacked data sets, chosen per member by its `DATA_AXIS` value (`place`).
        self.build_axes, self.paired = build_axes, paired
        self.option_axes, self.references, self.has_test = option_axes, references, has_test
        mesh = Mesh(np.array(devices), ("members",))
        self.n_devices = len(devices)
        self._members = NamedSharding(mesh, PartitionSpec("members"))
        self._replicated = NamedSharding(mesh, PartitionSpec())
        first = _checks.width(FIRST_PASS_STEPS if first_pass_steps is None
                              else first_pass_steps, "first_pass_steps")
        self.split_min_members = _checks.width(SPLIT_MIN_MEMBERS if split_min_members is None
                                               else split_min_members, "split_min_members")
        budget = self.options.get("max_steps", _default_max_steps())
        self._first_options = self.options | {"max_steps": first}
        self._split = first < budget and not one_pass
        self.second_pass_counts: list[int] = []
        self._platform = devices[0].platform
        self.concurrency: int | None = None  # `decide_concurrency`

    def place(self, dataset: dict[str, np.ndarray], refs: dict[str, np.ndarray]) -> tuple:
        """One data set and its references on every device: copied once per data set, and
        passed to `run` for each of its chunks (X of the Figure 7.1 grid: 800 kB, 13 chunks).
        Where `paired`, every array carries a leading axis over the data sets."""
        lead, d = dataset["X"].shape[:-2], dataset["X"].shape[-1]
        X_test = dataset.get("X_test", np.zeros((*lead, 1, d)))
        y_test = dataset.get("y_test", np.zeros((*lead, 1)))
        return jax.device_put((dataset["X"], dataset["y"], X_test, y_test, dict(refs)),
                              self._replicated)

    def _arguments(self, params: dict[str, np.ndarray], placed: tuple, options: dict) -> tuple:
        # device_put, not jnp.asarray: that compiles a conversion program per shape and dtype.
        params = jax.device_put(params, self._members)
        build_axes = tuple(k for k in params if k not in self.option_axes) if (
            self.build_axes is None) else self.build_axes
        return (self.build, options, self.option_axes, build_axes, self.paired,
                self.references, self.has_test, params, *placed)

    def _batch(self, params: dict[str, np.ndarray], placed: tuple, options: dict) -> dict:
        with _checks.traced_errors_as_nan():  # no host callbacks: cacheable across processes
            out = _integrate_batch(*self._arguments(params, placed, options))
        return {k: np.array(v) for k, v in out.items()}

    def decide_concurrency(self, params: dict[str, np.ndarray], placed: tuple) -> int:
        """How many chunks may run at once: on one CPU device, where each chunk runs in one
        pass, `_chunks_beside` (at most `MAX_CONCURRENT_CHUNKS`), provided that no batched
        LAPACK call of the batch's program is larger than `CONCURRENT_LAPACK_ELEMENTS` (larger
        ones of two programs running at once hang, `ibflow._lapack`); else 1. A small flow's
        program is a long chain of tiny operations that keeps one core busy at most, so two
        chunks at once nearly halve a sweep of flows through kinks on two cores
        (benchmarks/results/students.md). The program is lowered here (in the same context as
        the call, whose trace it shares) to read its LAPACK calls. Sets and returns
        `concurrency` (None until decided: a sweep of one round never asks)."""
        self.concurrency = 1
        at_once = min(_chunks_beside(), MAX_CONCURRENT_CHUNKS)
        if self._platform != "cpu" or self.n_devices != 1 or self._split or at_once < 2:
            return self.concurrency
        with _checks.traced_errors_as_nan():
            lowered = _integrate_batch.lower(*self._arguments(params, placed, self.options))
        module = lowered.lowered.compiler_ir("stablehlo")
        if largest_batched_lapack_call(module) <= CONCURRENT_LAPACK_ELEMENTS:
            self.concurrency = at_once
        return self.concurrency

    def run(self, params: dict[str, np.ndarray], placed: tuple) -> dict[str, np.ndarray]:
        """Integrate the members ``params`` (one flat array per axis) on a data set placed by
        `place`, in one pass or two (see the class)."""
        params = {k: np.asarray(v) for k, v in params.items()}
        size = len(next(iter(params.values())))
        if not self._split or size < self.split_min_members:
            self.second_pass_counts.append(0)
            return self._batch(params, placed, self.options)
        out = self._batch(params, placed, self._first_options)
        again = np.flatnonzero(out["status"] == _BUDGET_EXHAUSTED)
        self.second_pass_counts.append(len(again))
        if 2 * len(again) > size:  # typical members need more: later chunks run in one pass
            self._split = False
        if len(again):
            count = _second_batch_size(len(again), size, self.n_devices)
            index = np.concatenate([again, np.full(count - len(again), again[-1])])
            second = self._batch({k: v[index] for k, v in params.items()}, placed, self.options)
            for k, v in out.items():
                v[again] = second[k][:len(again)]
        return out


def _chunks_beside() -> int:
    """Chunks to run at once on this CPU: 2 on two cores (where the size rule of
    `CONCURRENT_LAPACK_ELEMENTS` was measured), half the cores on more. XLA's intra-op pool has
    a thread per core, and a program blocks at most one of them at a time in a LAPACK call
    (ibflow orders its calls, `ibflow._lapack`), so with half the threads free every split
    batch's tasks find a thread, should jaxlib split at other sizes on a larger pool."""
    cores = usable_cores()
    return 1 if cores < 2 else max(2, cores // 2)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _default_max_steps() -> int:
    return inspect.signature(integrate).parameters["max_steps"].default
