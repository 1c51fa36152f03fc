"""``ibflow.sweep``: integrate a whole grid of initializations as one compiled computation.

Glue only: `plan` decides what to compute, `store` keeps the results directory honest,
`executor` runs the compiled batches, `result` gathers and labels them.
"""

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .. import _checks
from .._integrate import integrate
from .._interpolants import min_l1_interpolant, min_l2_interpolant
from .._models.base import AbstractPredictorModel
from ..data._regression import RegressionData
from . import plan as _plan
from . import store as _store
from .executor import Executor
from .grid import Grid
from .order import AbstractOrder, CostOrder, GridOrder
from .result import STATUS_NAMES, SweepResult, assemble, status_code

_REFERENCES = {"min_l1": min_l1_interpolant, "min_l2": lambda X, y: np.asarray(
    min_l2_interpolant(X, y))}


#: Default members per chunk on a GPU: the 10⁴-member Figure 7.1 grid on an H200 took 1.05,
#: 0.54, 0.52, 0.46 and 0.60 s warm at chunks of 128, 512, 1024, 2048 and 10⁴
#: (`python -m benchmarks.gpu`, benchmarks/results/gpu.md; 0.94, 0.53, 0.49 and 0.52 s at 128,
#: 512, 2048 and 10⁴ on another lease).
ACCELERATOR_CHUNK = 2048


def sweep(
    build: Callable[..., eqx.Module], grid: Grid, data, *, out: str | Path | None = None,
    chunk_size: int | None = None, order: AbstractOrder | None = CostOrder(),
    references: Sequence[str] = ("min_l1", "min_l2"), progress: bool = True,
    devices: Sequence[jax.Device] | None = None, **integrate_options,
) -> SweepResult:
    """Integrate every member of ``grid`` (× every data set) to its limit in one compiled call.

    **Arguments:**
    - `build`: ``build(**params) -> model`` for one member, where ``params`` holds one scalar
      per grid axis that is not an integrate option (e.g. ``lambda scale, shape:
      DiagonalNet.from_scale_shape(scale, shape, dim=d)``; an integer ``seed`` axis can feed
      ``jax.random.key(seed)``). The model may be any Equinox module whose ``__call__(x)`` is a
      scalar. `build` is vmapped, so it must be traceable; pass an Equinox module (compared by
      value) rather than a fresh lambda to reuse one compilation across calls.
    - `grid`: a `Grid` of named axes. An axis named like a keyword-only option of
      ``ibflow.integrate`` (``rtol``, ``atol``, ``target_loss``, ``t_max``, ``stiff_switch``,
      ``dt0``: any option annotated as a scalar float) is passed to it per member as a traced
      float; an axis named like an option that cannot be an array (``max_steps``, ``solver``,
      ``adjoint``, ``flow``, ...) is refused.
    - `data`: a `RegressionData`, an ``(X, y)`` or ``(X, y, X_test, y_test)`` tuple, or a list
      of them (then a leading ``dataset`` axis is added to the results).
    - `out`: results directory (see `ibflow._sweep.store` for its guarantees). Each finished
      chunk is written atomically and verified on resume; re-running the same sweep computes only
      missing or invalid chunks. A directory holding a *different* sweep is refused, and so is
      one another run is writing.
    - `chunk_size`: members per compiled batch on one device. Default: 8 on CPU (small batches
      of cost-sorted members waste the fewest lockstep steps), ``ACCELERATOR_CHUNK`` = 2048 (or
      the grid's size, if smaller) on accelerators (measured: `benchmarks/gpu.py`). Every chunk
      has the same shape (the last one is padded), so the whole sweep compiles once.
    - `order`: a member-ordering strategy (`CostOrder()`: most expensive first by the models'
      `AbstractCostEstimate`; None: grid order). Members are chunked in this order.
    - `references`: distances to record for models with a predictor: ``"min_l1"``, ``"min_l2"``.
    - `progress`: a progress bar over chunks. `devices`: devices to shard the member axis over
      (default ``jax.devices()``).
    - `**integrate_options`: every other keyword goes to ``ibflow.integrate`` unchanged. Every
      member gets its own status; one failing member never stops the sweep. Runtime checks on
      traced values (e.g. a shape outside (−1, 1) reaching ``from_scale_shape``) turn that
      member's values into NaN, so its status is `nonfinite`, instead of raising: the batch
      then holds no host callback and its compiled program is stored in the persistent
      compilation cache (README, "Compilation cache").
    """
    options = _plan.integrate_options(integrate)
    _plan.check_options(integrate_options, options)
    if not isinstance(grid, Grid):
        raise ValueError(f"grid must be an ibflow.Grid; got {type(grid).__name__}.")
    if order is not None and not isinstance(order, AbstractOrder):
        raise ValueError("order must be an ibflow.AbstractOrder (e.g. CostOrder()) or None.")
    references = _checked_references(references)
    sweepable = _plan.sweepable_options(integrate)
    _, option_axes = _plan.split_axes(grid, options, sweepable, integrate_options,
                                      _plan.build_parameters(build))
    datasets, multi = _as_datasets(data)
    devices = list(devices or jax.devices())
    if chunk_size is None:
        chunk_size = 8 if devices[0].platform == "cpu" else min(ACCELERATOR_CHUNK, grid.size)
    chunk_size = _checks.width(chunk_size, "chunk_size")

    members = grid.members()
    build_params = {k: v for k, v in members.items() if k not in option_axes}
    # Abstract: only the model's type matters here (an eager build compiles each primitive).
    probe = eqx.filter_eval_shape(build, **{k: np.asarray(v[0]) for k, v in
                                            build_params.items()})
    predictor = isinstance(probe, AbstractPredictorModel)
    references = references if predictor else ()
    member_order = (order or GridOrder())(build, build_params, grid.size)
    fields = _plan.expected_fields("X_test" in datasets[0], predictor, references)
    plan = _plan.make_plan(grid, order=member_order, chunk_size=chunk_size,
                           n_datasets=len(datasets), option_axes=option_axes, fields=fields,
                           identity=_identity(build, datasets, integrate_options, references))
    metadata = _metadata(plan, devices, multi)
    executor = Executor(build, integrate_options, sweepable, option_axes, references,
                        "X_test" in datasets[0], devices)
    refs = [{r: _REFERENCES[r](ds["X"], ds["y"]) for r in references} for ds in datasets]
    if out is None:
        return _finish(_run(plan, executor, datasets, refs, None, progress), plan, metadata,
                       multi, grid, None)
    store = _store.Store(out)
    with store.locked():
        store.claim(metadata)
        records = _run(plan, executor, datasets, refs, store, progress)
        return _finish(records, plan, metadata, multi, grid, store)


def _checked_references(references) -> tuple[str, ...]:
    if isinstance(references, str):
        raise ValueError("references must be a sequence of names, e.g. ('min_l1',).")
    references = tuple(references)
    unknown = sorted(set(references) - set(_REFERENCES))
    if unknown:
        raise ValueError(f"unknown references {unknown}; known: {sorted(_REFERENCES)}.")
    return references


def _as_datasets(data) -> tuple[list[dict[str, np.ndarray]], bool]:
    """One dict per data set (X, y and optionally X_test, y_test), and whether `data` was a list."""
    multi = isinstance(data, Sequence) and not isinstance(data, tuple)
    items = data if multi else [data]
    if multi and not items:
        raise ValueError("data is an empty list.")
    out = []
    for item in items:
        if isinstance(item, RegressionData):
            X, y, Xt, yt = item.X, item.y, item.X_test, item.y_test
        elif isinstance(item, tuple) and len(item) in (2, 4):
            X, y, Xt, yt = (*item, None, None) if len(item) == 2 else item
        else:
            raise ValueError("data must be a RegressionData, an (X, y) or (X, y, X_test, y_test) "
                             "tuple, or a list of these.")
        X, y = _checks.data(X, y)
        entry = {"X": np.asarray(X), "y": np.asarray(y)}
        if Xt is not None:
            Xt, yt = _checks.data(Xt, yt)
            if Xt.shape[1] != X.shape[1]:
                raise ValueError(f"X_test has {Xt.shape[1]} columns but X has {X.shape[1]}.")
            entry |= {"X_test": np.asarray(Xt), "y_test": np.asarray(yt)}
        out.append(entry)
    if len({tuple((k, v.shape) for k, v in e.items()) for e in out}) != 1:
        raise ValueError("every data set in a sweep must have the same shapes.")
    return out, multi


def _identity(build, datasets, integrate_options, references) -> dict:
    """What makes two sweeps the same computation (hashed into the config)."""
    return {
        "data_fingerprints": [_store.fingerprint(*ds.values()) for ds in datasets],
        "build": getattr(build, "__qualname__", type(build).__qualname__),
        "build_source_sha256": _plan.source_fingerprint(build),
        "integrate_options": {k: _plan.tree_fingerprint(v)
                              for k, v in sorted(integrate_options.items())},
        "references": list(references),
    }


def _metadata(plan, devices, multi) -> dict:
    return {
        "format": "ibflow-sweep/2", "config_hash": plan.config_hash, "config": plan.config,
        "dims": ["dataset"] * multi + list(plan.config["axes"]),
        "status_codes": {n: status_code(n) for n in STATUS_NAMES},
        "versions": _versions(), "git_commit": _store.git_commit(),
        "devices": [str(d) for d in devices], "platform": devices[0].platform,
    }


def _run(plan, executor, datasets, refs, store, progress) -> dict:
    """Load every verified chunk, compute the others in rounds of one chunk per device (never
    mixing data sets; a short round repeats its last chunk, whose copy is discarded)."""
    records, todo = {}, []
    for di, ci in plan.work:
        rec = None if store is None else store.load_chunk(
            plan.number(di, ci), config_hash=plan.config_hash, dataset=di,
            index=plan.chunks[ci], fields=plan.fields)
        if rec is None:
            todo.append((di, ci))
        else:
            records[(di, ci)] = rec
    _warn_missing(plan, store, todo, records)
    bar = _progress(len(plan.work), len(plan.work) - len(todo), progress)
    n_dev = executor.n_devices
    for di in range(plan.n_datasets):
        mine = [t for t in todo if t[0] == di]
        placed = executor.place(datasets[di], refs[di]) if mine else None
        for group in (mine[i:i + n_dev] for i in range(0, len(mine), n_dev)):
            slots = group + [group[-1]] * (n_dev - len(group))
            index = np.concatenate([_padded(plan.chunks[ci], plan.chunk_size) for _, ci in slots])
            result = executor.run(plan.member_params(index), placed)
            for slot, (_, ci) in enumerate(group):
                idx, lo = plan.chunks[ci], slot * plan.chunk_size
                rec = {k: v[lo:lo + len(idx)] for k, v in result.items()} | {"index": idx}
                records[(di, ci)] = rec
                if store is not None:
                    store.save_chunk(plan.number(di, ci), rec, config_hash=plan.config_hash,
                                     dataset=di)
                bar.update(1)
    bar.close()
    return records


def _warn_missing(plan, store, todo, records) -> None:
    """Chunks are written in work order, so an absent chunk before a present one was removed."""
    if store is None or not records:
        return
    last = max(plan.work.index(key) for key in records)
    for di, ci in todo:
        path = store.chunk_path(plan.number(di, ci))
        if plan.work.index((di, ci)) < last and not path.exists():
            warnings.warn(f"sweep chunk file {path} is missing although later chunks exist "
                          "(deleted?); recomputing it.", stacklevel=4)


def _padded(chunk: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([chunk, np.full(size - len(chunk), chunk[-1])])


def _finish(records, plan, metadata, multi, grid, store) -> SweepResult:
    lead = (plan.n_datasets,) * multi + grid.shape
    fields = assemble(records, lead, plan.n_datasets, grid.size)
    axes = ({"dataset": np.arange(plan.n_datasets)} if multi else {}) | dict(grid.axes)
    steps = np.concatenate([r["steps"] for r in records.values()])
    lockstep = sum(int(r["steps"].max()) * plan.chunk_size for r in records.values())
    metadata = metadata | {"lockstep_efficiency": float(steps.sum() / max(lockstep, 1))}
    if store is not None:
        store.save_results(dict(fields) | {f"axis_{k}": v for k, v in axes.items()}, metadata)
    return SweepResult(fields, axes, metadata)


def _versions() -> dict[str, str]:
    import diffrax
    import equinox
    import jaxlib

    from .. import __version__

    return {"ibflow": __version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "diffrax": diffrax.__version__, "equinox": equinox.__version__}


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total, done, enabled):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="sweep chunks", unit="chunk", smoothing=0.1)
