"""``ibflow.sweep``: integrate a whole grid of initializations as one compiled computation."""

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .. import _checks
from .._integrate import integrate
from .._interpolants import min_l1_interpolant, min_l2_interpolant
from .._models.base import AbstractModel, AbstractPredictorModel
from .._models.diagonal import DiagonalNet
from ..data._regression import RegressionData
from . import store
from .grid import Grid
from .result import STATUS_NAMES, SweepResult, status_code

#: Integrate options a sweep passes through unchanged (see ``ibflow.integrate``).
_INTEGRATE_OPTIONS = ("flow", "loss", "target_loss", "rtol", "atol", "solver", "stiff_solver",
                      "stiff_switch", "max_steps", "t_max", "method")
#: Grid axes with these names are per-member integrate options (traced), not `build` arguments.
MEMBER_OPTIONS = ("target_loss", "rtol", "atol", "stiff_switch", "t_max")


def _split_params(params):
    options = {k: v for k, v in params.items() if k in MEMBER_OPTIONS}
    return {k: v for k, v in params.items() if k not in MEMBER_OPTIONS}, options


def diagonal_plateau_cost(model: AbstractModel) -> jax.Array:
    """Cheap predictor of a diagonal net's step count: the escape from a small initialization
    takes ~log(1/k) e-folds (THEORY §2.3, k = 2·sqrt(K² − w₀²)), so more steps for small k."""
    if not isinstance(model, DiagonalNet):
        raise ValueError("diagonal_plateau_cost needs a DiagonalNet.")
    p, m = model.exp_coefficients()
    return -jnp.mean(jnp.log(4 * jnp.sqrt(p * m) + 1e-300))


def _as_datasets(data) -> list[dict[str, np.ndarray]]:
    """One dict per data set: X, y and (optionally) X_test, y_test."""
    items = data if isinstance(data, Sequence) and not isinstance(data, tuple) else [data]
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
            entry |= {"X_test": np.asarray(Xt), "y_test": np.asarray(yt)}
        out.append(entry)
    if len({(e["X"].shape, "X_test" in e) for e in out}) != 1:
        raise ValueError("every data set in a sweep must have the same shapes.")
    return out


def _source_fingerprint(fn: Callable) -> str:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = getattr(fn, "__qualname__", repr(type(fn)))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@eqx.filter_jit
def _integrate_batch(build, options, reference_names, has_test, params, X, y, X_test, y_test,
                     refs):
    """The compiled per-round computation, vmapped over members. Module-level so that repeated
    sweeps with the same `build` (compared by identity, or by value for an Equinox module) and the
    same static options reuse one compilation; float options arrive as traced arrays."""

    def one(p):
        model_params, member_options = _split_params(p)
        model = build(**model_params)
        sol = integrate(model, X, y, throw=False, **(options | member_options))
        record = {"loss": sol.loss, "steps": sol.steps, "time": sol.time,
                  "status": sol.status._value}
        if isinstance(model, AbstractPredictorModel):
            w = sol.predictor
            record["predictor"] = w
            if has_test:
                record["test_error"] = jnp.mean((X_test @ w - y_test) ** 2)
            for name in reference_names:
                record[f"distance_{name}"] = (jnp.linalg.norm(w - refs[name])
                                              / jnp.linalg.norm(refs[name]))
        return record

    return jax.vmap(one)(params)


def _chunk_function(build, options, reference_names, has_test, mesh):
    """Shards the member axis over the mesh (GSPMD partitions the vmapped solve); data and
    references are replicated. (shard_map would give each device its own while loop, but
    lineax's linear solves inside the implicit phase do not trace under it in this JAX.)"""
    members_spec = NamedSharding(mesh, PartitionSpec("members"))
    replicated = NamedSharding(mesh, PartitionSpec())
    options = {k: jnp.asarray(v, dtype=float) if k in MEMBER_OPTIONS else v
               for k, v in options.items()}
    names = tuple(reference_names)

    def run(params, X, y, X_test, y_test, refs):
        params = jax.device_put(params, members_spec)
        X, y, X_test, y_test, refs = jax.device_put((X, y, X_test, y_test, refs), replicated)
        return _integrate_batch(build, options, names, has_test, params, X, y, X_test, y_test,
                                refs)

    return run


def sweep(
    build: Callable[..., AbstractModel], grid: Grid, data, *, out: str | Path | None = None,
    chunk_size: int | None = None, order_by: Callable[[AbstractModel], jax.Array] | str | None = "auto",
    references: Sequence[str] = ("min_l1", "min_l2"), progress: bool = True,
    devices: Sequence[jax.Device] | None = None, **integrate_options,
) -> SweepResult:
    """Integrate every member of ``grid`` (× every data set) to its limit in one compiled call.

    **Arguments:**
    - `build`: ``build(**params) -> model`` for one member, where ``params`` holds one scalar per
      grid axis (e.g. ``lambda scale, shape: DiagonalNet.from_scale_shape(scale, shape, dim=d)``;
      an integer ``seed`` axis can feed ``jax.random.key(seed)``). It is vmapped, so it must be
      traceable.
    - `grid`: a `Grid` of named axes. Axes named like a per-member integrate option
      (``target_loss``, ``rtol``, ``atol``, ``stiff_switch``, ``t_max``) go to ``integrate``
      instead of `build`, so tolerances and budgets can be swept too. `data`: a `RegressionData`, an ``(X, y)`` tuple, or a list
      of them (then a leading ``dataset`` axis is added to the results).
    - `out`: results directory (see ``ibflow._sweep.store``). Each finished chunk is written
      atomically; re-running the same sweep resumes and recomputes only missing chunks. A
      directory holding a *different* sweep is refused.
    - `chunk_size`: members per compiled batch on one device (memory bound). Default: 8 on CPU
      (small batches of cost-sorted members waste the fewest lockstep steps: on the Figure 7.1
      grid, chunks of 100/34/20/10 ran in 70/55/36/23 s with lockstep efficiency
      0.21/0.50/0.65/0.81, measured together on a loaded 2-core machine), 128 on accelerators
      (wide batches keep a GPU busy). Every chunk has
      the same shape (the last one is padded), so the whole sweep compiles once. With several
      devices, each device integrates one whole chunk at a time, so a member's arithmetic is
      the same on 1 or 8 devices and results are bitwise identical.
    - `order_by`: lockstep-waste reduction. In a vmapped adaptive solve every member pays for
      the slowest one's steps, so members are sorted by a cheap cost predictor and chunked in
      that order, grouping members of similar cost. ``"auto"`` uses
      `diagonal_plateau_cost` for diagonal nets and no reordering otherwise; pass a function of
      the model, or None.
    - `references`: distances to record: ``"min_l1"`` (LP), ``"min_l2"``.
    - `devices`: the devices to shard the member axis over (default: all of ``jax.devices()``;
      on several hosts, call ``jax.distributed.initialize()`` first — each process then sees
      every device of the job).
    - `**integrate_options`: passed to ``ibflow.integrate`` (e.g. ``rtol``, ``target_loss``).
      Every member gets its own status; one failing member never stops the sweep.
    """
    unknown = set(integrate_options) - set(_INTEGRATE_OPTIONS)
    if unknown:
        raise ValueError(f"unknown integrate options {sorted(unknown)}; allowed: "
                         f"{list(_INTEGRATE_OPTIONS)}.")
    if not isinstance(grid, Grid):
        raise ValueError("grid must be an ibflow.Grid.")
    datasets = _as_datasets(data)
    multi = isinstance(data, Sequence) and not isinstance(data, tuple)
    devices = list(devices or jax.devices())
    mesh = Mesh(np.array(devices), ("members",))
    if chunk_size is None:
        chunk_size = 8 if devices[0].platform == "cpu" else 128
    chunk_size = _checks.width(chunk_size, "chunk_size")
    n_dev = len(devices)
    members = grid.members()
    n_members = grid.size

    # Reference interpolants, once per data set (host LP for ℓ1).
    refs = []
    for ds in datasets:
        r = {}
        if "min_l2" in references:
            r["min_l2"] = np.asarray(min_l2_interpolant(ds["X"], ds["y"]))
        if "min_l1" in references:
            r["min_l1"] = min_l1_interpolant(ds["X"], ds["y"])
        refs.append(r)
    unknown_refs = set(references) - {"min_l1", "min_l2"}
    if unknown_refs:
        raise ValueError(f"unknown references {sorted(unknown_refs)}.")

    jparams = {k: jnp.asarray(v) for k, v in members.items()}
    model_jparams, _ = _split_params(jparams)
    if order_by == "auto":
        probe = build(**{k: v[0] for k, v in model_jparams.items()})
        order_by = diagonal_plateau_cost if isinstance(probe, DiagonalNet) else None
    if order_by is not None:
        cost = np.asarray(jax.vmap(lambda p: order_by(build(**p)))(model_jparams))
        order = np.argsort(-cost, kind="stable")  # most expensive first: an honest ETA
    else:
        order = np.arange(n_members)
    chunks = [order[i:i + chunk_size] for i in range(0, n_members, chunk_size)]

    options = {k: v for k, v in integrate_options.items()}
    config = {
        "axes": grid.describe(), "datasets": len(datasets),
        "data_fingerprints": [store.fingerprint(ds["X"], ds["y"]) for ds in datasets],
        "build": getattr(build, "__qualname__", repr(build)),
        "build_source_sha256": _source_fingerprint(build),
        "integrate_options": {k: repr(v) for k, v in sorted(options.items())},
        "references": list(references), "chunk_size": chunk_size,
        "chunks": [c.tolist() for c in chunks],
    }
    config_hash = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    metadata = {
        "format": "ibflow-sweep/1", "config_hash": config_hash, "config": config,
        "status_codes": {n: status_code(n) for n in STATUS_NAMES},
        "versions": _versions(), "git_commit": store.git_commit(),
        "devices": [str(d) for d in devices], "platform": devices[0].platform,
    }
    if out is not None:
        out = Path(out)
        existing = store.read_metadata(out)
        if existing is not None and existing.get("config_hash") != config_hash:
            raise ValueError(
                f"{out} holds a different sweep (config hash {existing.get('config_hash')} != "
                f"{config_hash}); choose another --out or delete it.")
        if existing is None:
            store.write_metadata(out, metadata)
        else:
            metadata = existing

    run_chunk = _chunk_function(build, options, [r for r in references], "X_test" in datasets[0],
                                mesh)
    pending = [(di, ci) for di in range(len(datasets)) for ci in range(len(chunks))]
    records: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    todo = []
    for di, ci in pending:
        path = store.chunk_path(out, di * len(chunks) + ci) if out is not None else None
        if path is not None and path.exists():
            with np.load(path) as f:
                records[(di, ci)] = {k: f[k] for k in f.files}
        else:
            todo.append((di, ci))

    bar = _progress(len(pending), len(pending) - len(todo), progress)
    # Rounds of one chunk per device, never mixing data sets; a short round repeats its last
    # chunk (the copy is discarded).
    rounds = [todo_ds[i:i + n_dev] for di in range(len(datasets))
              for todo_ds in [[t for t in todo if t[0] == di]]
              for i in range(0, len(todo_ds), n_dev)]
    for group in rounds:
        slots = group + [group[-1]] * (n_dev - len(group))
        di = group[0][0]
        ds = datasets[di]
        padded = [np.concatenate([chunks[ci], np.full(chunk_size - len(chunks[ci]),
                                                      chunks[ci][-1])]) for _, ci in slots]
        params = {k: jnp.asarray(v[np.concatenate(padded)]) for k, v in members.items()}
        X_test = ds.get("X_test", np.zeros((1, ds["X"].shape[1])))
        y_test = ds.get("y_test", np.zeros(1))
        result = {k: np.asarray(v) for k, v in run_chunk(
            params, ds["X"], ds["y"], X_test, y_test,
            {k: jnp.asarray(v) for k, v in refs[di].items()}).items()}
        for slot, (d_i, ci) in enumerate(group):
            idx = chunks[ci]
            lo = slot * chunk_size
            rec = {k: v[lo:lo + len(idx)] for k, v in result.items()}
            rec["index"] = idx
            records[(d_i, ci)] = rec
            if out is not None:
                store.atomic_savez(store.chunk_path(out, d_i * len(chunks) + ci), rec)
            bar.update(1)
    bar.close()

    fields = _assemble(records, len(datasets), n_members, grid.shape, multi)
    axes = ({"dataset": np.arange(len(datasets))} if multi else {}) | dict(grid.axes)
    steps = np.concatenate([r["steps"] for r in records.values()])
    lockstep = sum(int(r["steps"].max()) * chunk_size for r in records.values())
    metadata["lockstep_efficiency"] = float(steps.sum() / max(lockstep, 1))
    result = SweepResult(fields, axes, metadata)
    if out is not None:
        arrays = dict(fields) | {f"axis_{k}": v for k, v in axes.items()}
        if multi:
            metadata["config"]["axes"] = {"dataset": list(range(len(datasets)))} | metadata[
                "config"]["axes"]
        store.atomic_savez(out / "results.npz", arrays)
        store.write_metadata(out, metadata)
    return result


def _assemble(records, n_datasets, n_members, grid_shape, multi):
    fields = {}
    for (di, _), rec in records.items():
        for name, values in rec.items():
            if name == "index":
                continue
            if name not in fields:
                fields[name] = np.zeros((n_datasets, n_members) + values.shape[1:], values.dtype)
            fields[name][di, rec["index"]] = values
    lead = ((n_datasets,) if multi else ()) + tuple(grid_shape)
    return {k: v.reshape(lead + v.shape[2:]) for k, v in fields.items()}


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


