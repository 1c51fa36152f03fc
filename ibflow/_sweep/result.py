"""What a sweep returns, how its chunks are gathered, and its labeled (xarray) view."""

import json
import warnings
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._result import AbstractResult
from .._status import STATUS_NAMES, Status, status_code
from . import store as _store

#: Per-variable attributes of the labeled view (CF-style ``units`` and ``long_name``).
_DESCRIPTIONS = {
    "loss": ("final training loss L(θ) of the flow (½·mean squared residual for SquareLoss)",
             "loss"),
    "steps": ("ODE solver steps taken, all phases (-1: not computed)", "1"),
    "time": ("flow time reached", "flow time"),
    "status": ("outcome of the member's flow (ibflow.Status code)", "1"),
    "test_error": ("test MSE of the model's own outputs, mean((f(x) - y)²) over the test set",
                   "squared output units"),
    "predictor": ("end-to-end weight w̃ of the model at the end of the flow", "output/input"),
    "switches": ("activation switching events located along the flow (crossings, slide "
                 "entries and exits; piecewise-linear models)", "1"),
    "slides": ("Filippov sliding-mode entries along the flow (piecewise-linear models)", "1"),
    "sliding_time": ("flow clock spent with at least one pre-activation sliding on its kink",
                     "flow time"),
    "parameters": ("the final model's floating-point array leaves, flattened in pytree order "
                   "(jax.flatten_util.ravel_pytree; NaN: not computed)", "1"),
}
#: The name of a field's trailing dimension in the labeled view.
_TRAILING = {"predictor": "coordinate", "parameters": "parameter"}


def _describe(name: str) -> dict:
    if name.startswith("distance_"):
        ref = name.removeprefix("distance_")
        return {"long_name": f"relative distance ‖w̃ − w_ref‖/‖w_ref‖ to the {ref} interpolant",
                "units": "1"}
    long_name, units = _DESCRIPTIONS.get(name, (name, ""))
    attrs = {"long_name": long_name, "units": units}
    if name == "status":
        attrs |= {"flag_values": np.arange(len(STATUS_NAMES)),
                  "flag_meanings": " ".join(STATUS_NAMES)}
    return attrs


def assemble(records: dict[tuple[int, int], dict[str, np.ndarray]], lead_shape: tuple[int, ...],
             n_datasets: int, n_members: int) -> dict[str, np.ndarray]:
    """Gather verified chunk records into arrays of shape ``lead_shape`` (+ trailing dims).

    A cell no record covers reads NaN (float fields), -1 (integer fields) and status
    ``not_computed``: never a value that could pass for a result."""
    templates = {"loss": np.zeros(1), "time": np.zeros(1), "steps": np.zeros(1, np.int64),
                 "status": np.zeros(1, np.int32)}
    for rec in records.values():
        templates |= {k: v for k, v in rec.items() if k != "index"}
    first = ("loss", "steps", "time", "status", "test_error", "predictor", "parameters")
    rank = {name: (first.index(name) if name in first else len(first), name) for name in templates}
    fields = {}
    for name, t in sorted(templates.items(), key=lambda item: rank[item[0]]):
        fill = (status_code("not_computed") if name == "status"
                else np.nan if t.dtype.kind in "fc" else -1)
        fields[name] = np.full((n_datasets, n_members) + t.shape[1:], fill, t.dtype)
    for (di, _), rec in records.items():
        for name, values in rec.items():
            if name != "index":
                fields[name][di, rec["index"]] = values
    return {k: v.reshape(lead_shape + v.shape[2:]) for k, v in fields.items()}


class SweepResult(AbstractResult):
    """Per-member results in grid order.

    - ``fields``: name → array of shape ``dims`` (+ trailing dims, e.g. ``(d,)`` for
      ``predictor``). Always: ``loss``, ``steps``, ``status`` (int codes, see ``status_names``;
      ``not_computed`` for a cell without a result), ``time``, ``parameters`` (the final
      model's trained leaves, flattened: `SweepResult.model` rebuilds it); with test data
      ``test_error``
      (MSE of the model's own outputs); for models with a ``predictor()``: ``predictor`` and
      ``distance_<ref>`` (relative distances to reference interpolants).
    - ``axes``: the dimensions (name → values), in order: ``dataset`` for a list of data sets,
      then the grid axes.
    - ``metadata``: the ``sweep.json`` contents.

    `status` is the ``status`` field as a `Status` (one item per member), so `converged` and
    `summary` are those of every other result.
    """

    fields: dict[str, np.ndarray]
    axes: dict[str, np.ndarray]
    metadata: dict

    @property
    def status(self) -> Status:
        codes = jnp.asarray(self.fields["status"], dtype=Status.converged._value.dtype)
        return eqx.tree_at(lambda s: s._value, Status.converged, codes)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    @property
    def status_names(self) -> dict[int, str]:
        return {status_code(n): n for n in STATUS_NAMES}

    def model(self, build, **params):
        """The final model of the member with these axis values (every axis, by value), rebuilt
        from ``parameters`` on the structure of ``build(**build_params)``."""
        missing = sorted(set(self.axes) - set(params))
        if missing:
            raise ValueError(f"model() needs a value for every axis; missing {missing}.")
        cell = []
        for name, values in self.axes.items():
            hits = np.flatnonzero(values == params[name])
            if hits.size == 0:
                raise ValueError(f"axis {name!r} has no value {params[name]!r}.")
            cell.append(int(hits[0]))
        options = self.metadata["config"].get("option_axes", [])
        init = build(**{k: jnp.asarray(v) for k, v in params.items()
                        if k not in options and k != "dataset"})
        trained, static = eqx.partition(init, eqx.is_inexact_array)
        _, unravel = ravel_pytree(trained)
        flat = jnp.asarray(self.fields["parameters"][tuple(cell)])
        return eqx.combine(unravel(flat), static)

    @classmethod
    def load(cls, out: str | Path) -> "SweepResult":
        """Read a results directory: ``results.npz`` when it belongs to ``sweep.json``, else
        whatever verified chunks there are (an unfinished sweep; missing cells ``not_computed``,
        with a warning)."""
        out = Path(out)
        metadata = _store.read_metadata(out)
        if metadata is None:
            raise ValueError(f"{str(out)!r} is not a sweep results directory (no valid "
                             "sweep.json).")
        problem = _store.metadata_problem(metadata)
        if problem is not None:
            raise ValueError(f"{out / 'sweep.json'} {problem}; its results cannot be read. "
                             "Re-run the sweep into this directory to rebuild it.")
        config = metadata["config"]
        dims = metadata.get("dims", list(config["axes"]))
        axes = {name: (np.arange(config["datasets"]) if name == "dataset"
                       else np.asarray(config["axes"][name])) for name in dims}
        shape = tuple(len(v) for v in axes.values())
        path = out / "results.npz"
        try:
            arrays = _store.read_npz(path)
            if (str(arrays.pop("config_hash", "")) == metadata["config_hash"]
                    and _results_match(arrays, dims, config["fields"], shape)):
                for name in dims:
                    arrays.pop(f"axis_{name}")
                return cls(arrays, axes, metadata)
        except Exception:  # noqa: BLE001  (absent or unreadable: read the verified chunks)
            pass
        return cls(_from_chunks(out, metadata, shape), axes, metadata)

    def to_xarray(self):
        """An ``xarray.Dataset``: dims = the axes (+ ``coordinate`` for the predictor's d axis),
        coords = axis values, one variable per field with ``long_name``/``units`` (and CF
        ``flag_values``/``flag_meanings`` for ``status``), metadata in ``attrs`` (JSON strings
        where not a number or a string)."""
        import xarray as xr

        dims = tuple(self.axes)
        coords = {k: np.asarray(v) for k, v in self.axes.items()}
        data_vars = {}
        for name, values in self.fields.items():
            extra = values.ndim - len(dims)
            base = _TRAILING.get(name, f"{name}_dim")
            trailing = (base,) if extra == 1 else tuple(f"{base}_{i}" for i in range(extra))
            coords |= {t: np.arange(n) for t, n in zip(trailing, values.shape[len(dims):])}
            data_vars[name] = (dims + trailing, values, _describe(name))
        attrs = {k: v if isinstance(v, (str, int, float)) and not isinstance(v, bool)
                 else json.dumps(v, default=str) for k, v in self.metadata.items()}
        return xr.Dataset(data_vars, coords, attrs)

    def __repr__(self) -> str:
        axes = ", ".join(f"{k}[{len(v)}]" for k, v in self.axes.items())
        return (f"SweepResult({axes}; fields={sorted(self.fields)}; "
                f"converged {int(self.converged.sum())}/{self.converged.size})")


def _results_match(arrays: dict, dims: list, fields: dict, shape: tuple[int, ...]) -> bool:
    """Whether ``results.npz`` holds exactly the fields of the plan, each of its dtype and of
    shape ``dims + trailing``, and one axis array per dimension."""
    if set(arrays) != set(fields) | {f"axis_{name}" for name in dims}:
        return False
    return all(arrays[name].dtype.str == dtype and arrays[name].shape == (*shape, *trailing)
               for name, (dtype, trailing) in fields.items())


def _from_chunks(out: Path, metadata: dict, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    config = metadata["config"]
    store = _store.Store(out)
    chunks = [np.asarray(c, dtype=np.int64) for c in config["chunks"]]
    records = {}
    for di in range(config["datasets"]):
        for ci, index in enumerate(chunks):
            rec = store.load_chunk(di * len(chunks) + ci, config_hash=metadata["config_hash"],
                                   dataset=di, index=index, fields=config["fields"])
            if rec is not None:
                records[(di, ci)] = rec
    total = config["datasets"] * len(chunks)
    if len(records) < total:
        warnings.warn(f"{out}: unfinished sweep, {len(records)} of {total} chunks verified; "
                      "the other cells have status not_computed.", stacklevel=3)
    n_members = sum(len(c) for c in chunks)
    return assemble(records, shape, config["datasets"], n_members)


def open_sweep(out: str | Path):
    """The results directory ``out`` as an ``xarray.Dataset`` (see `SweepResult.to_xarray`)."""
    return SweepResult.load(out).to_xarray()
