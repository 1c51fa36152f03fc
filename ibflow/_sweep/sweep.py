"""``ibflow.sweep``: integrate a whole grid of initializations as one compiled computation.

Glue only: `plan` decides what to compute, `store` keeps the results directory honest,
`executor` runs the compiled batches, `result` gathers and labels them.
"""

import collections
import hashlib
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import _checks, _integrate
from .._flows.gradient import GradientFlow
from .._formulation import PreferReduction
from .._integrate import check_option, integrate
from .._interpolants import min_l1_interpolant, min_l2_interpolant
from .._kinks.base import AbstractSwitchingDynamics
from .._losses import SquareLoss
from .._models.base import AbstractPredictorModel
from .._progress import bar as _bar
from .._version import __version__
from ..data._regression import regression_arrays
from . import identity
from . import plan as _plan
from . import store as _store
from .executor import Executor
from .grid import Grid, checked_grid
from .order import AbstractOrder, CostOrder, GridOrder
from .result import STATUS_NAMES, SweepResult, assemble, status_code

_REFERENCES = {"min_l1": min_l1_interpolant, "min_l2": lambda X, y: np.asarray(
    min_l2_interpolant(X, y))}
#: Reference interpolants already computed in this process, by name and data content: a
#: reference depends on the data set only, and the min-ℓ1 one is a linear program (0.3 s for the
#: Figure 7.1 data, longer than the sweep of its 100 members), so repeated sweeps of one data
#: set solve it once. At most `_REFERENCE_CACHE_SIZE` entries (the oldest go first).
_REFERENCE_CACHE: dict[tuple, np.ndarray] = {}
_REFERENCE_CACHE_SIZE = 16


def _reference(name: str, X, y) -> np.ndarray:
    """The reference interpolant `name` of the data ``(X, y)``, computed once per content."""
    X, y = np.ascontiguousarray(X), np.ascontiguousarray(y)
    digest = hashlib.blake2b(X.tobytes(), digest_size=16)
    digest.update(y.tobytes())
    key = (name, X.shape, X.dtype.str, y.shape, y.dtype.str, digest.hexdigest())
    if key not in _REFERENCE_CACHE:
        while len(_REFERENCE_CACHE) >= _REFERENCE_CACHE_SIZE:
            del _REFERENCE_CACHE[next(iter(_REFERENCE_CACHE))]
        value = np.array(_REFERENCES[name](X, y))
        value.setflags(write=False)  # shared by later sweeps
        _REFERENCE_CACHE[key] = value
    return _REFERENCE_CACHE[key]


#: Default members per chunk on a GPU: on the 10⁴-member Figure 7.1 grid, chunks of 512 to 2048
#: members run fastest; smaller ones leave the GPU underused, and a larger batch gains nothing
#: (see benchmarks/results/gpu.md).
ACCELERATOR_CHUNK = 2048
#: Default members per chunk on a CPU: small batches of cost-sorted members waste the fewest
#: lockstep steps.
CPU_CHUNK = 8
#: Default members per chunk on a CPU where the batch compacts (`_compacting`): its members share
#: each Newton matrix product (`DiagonalReducedDynamics.newton_table`). The Figure 7.1 grid (100
#: members) on the 2-core CPU: 0.17–0.19 s in one batch, 0.21 s in chunks of 32, 0.23 s in
#: chunks of 8, warm.
COMPACTING_CPU_CHUNK = 128
#: Default members per chunk on a CPU for flows through kinks: one. A vmapped batch of such
#: flows runs its segments (switch to switch) in lockstep, each as long as the longest of the
#: batch's, so a member switching every few steps waits at every switch for one that does not;
#: a CPU gains little from vmapping these small flows anyway. Warm, on the 2-core CPU: 16 ReLU
#: students (benchmarks/students.py) 18.8 s in chunks of 8, 2.9 s one by one; 32 leaky
#: neurons 0.99 s and 0.55 s.
SWITCHING_CPU_CHUNK = 1


def sweep(
    build: Callable[..., eqx.Module], grid: Grid, data, *, out: str | Path | None = None,
    chunk_size: int | None = None, order: AbstractOrder | None = CostOrder(),
    references: Sequence[str] = ("min_l1", "min_l2"), progress: bool | None = None,
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
      of them (of one shape). With a list, every member runs on every data set (a leading
      ``dataset`` axis is added to the results), unless the grid has an axis named
      ``data_index``: then its values index the list, and each member runs on its own data
      set (per-member data, e.g. ``Grid(data_index=np.arange(256))`` with one teacher–student
      data set per seed). `build` receives that axis only if it takes a ``data_index``
      argument.
    - `out`: results directory (see `ibflow._sweep.store` for its guarantees). Each finished
      chunk is written atomically and verified on resume; re-running the same sweep computes only
      missing or invalid chunks. A directory holding a *different* sweep is refused, and so is
      one another run is writing. "The same sweep" is decided by content (docs/guarantees.md):
      the models `build` gives for the grid's first and last members (every array and static
      field), `build`'s own code, closure and the module-level values it reads, the data, every
      option by value (functions by code and closure values) and the package versions. An
      option that cannot be identified that way (an object of unknown type) is refused with
      ``out=``, naming it.
    - `chunk_size`: members per compiled batch on one device. Default on a CPU: 8 (small
      batches of cost-sorted members waste the fewest lockstep steps), 1 for flows through
      kinks (a batch would run their segments in lockstep), or 128 where the flows end
      in a tail whose batch compacts (the default Newton tail of the diagonal net: members that
      finish early cost nothing, and one large batch shares its matrix products);
      ``ACCELERATOR_CHUNK`` = 2048 on accelerators (or the grid's size, if smaller). Every chunk
      has the same shape (the last one is padded), so the whole sweep compiles once. On one
      CPU device, chunks run several at once (two on two cores, half the cores on more) where
      every chunk runs in one pass and the program's batched LAPACK calls are small enough
      not to hang beside each other (`ibflow._lapack.CONCURRENT_LAPACK_ELEMENTS`): a flow
      through kinks keeps one core busy at most. The metadata's ``chunks_at_once`` says how
      many ran at once (None: the sweep computed one round of chunks or none).
    - `order`: a member-ordering strategy (`CostOrder()`: most expensive first by the models'
      `AbstractCostEstimate`; None: grid order). Members are chunked in this order.
    - `references`: distances to record for models with a predictor: ``"min_l1"``, ``"min_l2"``.
    - `progress`: a progress bar over chunks on stderr, labelled by the name of `out`; None
      (default): only when stderr is a terminal. `devices`: devices to shard the member axis over
      (default ``jax.devices()``).
    - `**integrate_options`: every other keyword goes to ``ibflow.integrate`` unchanged. Every
      member gets its own status; one failing member never stops the sweep or changes another
      member's result. Every grid value is validated before anything runs: a value of an
      option axis outside the option's range, or a member whose model `build` cannot make
      (a non-finite parameter, e.g. a shape outside (−1, 1) reaching ``from_scale_shape``),
      is refused with a ValueError naming the axis and the value. Runtime checks on traced
      values inside the batch turn only the failing member's values into NaN (status
      `nonfinite`) instead of raising: the batch holds no host callback and its compiled
      program is stored in the persistent compilation cache (README, "Compilation cache").
    """
    options = _plan.integrate_options(integrate)
    _plan.check_options(integrate_options, options)
    checked_grid(grid)
    if order is not None and not isinstance(order, AbstractOrder):
        raise ValueError("order must be an ibflow.AbstractOrder (e.g. CostOrder()) or None.")
    references = _checked_references(references)
    sweepable = _plan.sweepable_options(integrate)
    build_axes, option_axes = _plan.split_axes(grid, options, sweepable, integrate_options,
                                               _plan.build_parameters(build))
    _check_option_axes(grid, option_axes)
    datasets, multi = _as_datasets(data)
    paired = _paired(grid, datasets, multi)
    multi = multi and not paired
    devices = list(devices or jax.devices())
    members = grid.members()
    build_params = {k: v for k, v in members.items() if k in build_axes}
    ends = _built_models(build, build_params, grid)
    dynamics = _dynamics(ends[0], datasets[0], integrate_options)
    compacting = _compacting(dynamics, integrate_options, option_axes)
    switching = _through_kinks(dynamics)
    if chunk_size is None:
        chunk_size = _default_chunk(devices[0].platform, grid.size, compacting, switching)
    chunk_size = _checks.width(chunk_size, "chunk_size")
    predictor = isinstance(ends[0], AbstractPredictorModel)
    references = references if predictor else ()
    member_order = (order or GridOrder())(build, build_params, grid.size)
    trained, _ = ravel_pytree(eqx.filter(ends[0], eqx.is_inexact_array))
    fields = _plan.expected_fields("X_test" in datasets[0], predictor, references,
                                   kinks=switching,
                                   n_parameters=trained.size, dim=datasets[0]["X"].shape[1])
    identity = _identity(build, ends, datasets, integrate_options, references,
                         resumable=out is not None)
    plan = _plan.make_plan(grid, order=member_order, chunk_size=chunk_size,
                           n_datasets=1 if paired else len(datasets), option_axes=option_axes,
                           fields=fields, identity=identity)
    metadata = _metadata(plan, devices, multi)
    executor = Executor(build, integrate_options, sweepable, option_axes, references,
                        "X_test" in datasets[0], devices, one_pass=compacting or switching,
                        build_axes=build_axes, paired=paired)
    refs = [{r: _reference(r, ds["X"], ds["y"]) for r in references} for ds in datasets]
    if paired:  # one placement: every data set, stacked, each member reading its own
        datasets, refs = [_stacked(datasets)], [_stacked(refs)]
    if out is None:
        records = _run(plan, executor, datasets, refs, None, progress, "sweep")
        return _finish(records, plan, metadata | {"chunks_at_once": executor.concurrency},
                       multi, grid, None)
    store = _store.Store(out)
    with store.locked():
        store.claim(metadata)
        records = _run(plan, executor, datasets, refs, store, progress,
                       f"sweep {Path(out).name}")
        return _finish(records, plan, metadata | {"chunks_at_once": executor.concurrency},
                       multi, grid, store)


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
        arrays = regression_arrays(item)
        if arrays is not None:
            X, y, Xt, yt = arrays
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


def _paired(grid: Grid, datasets: list[dict], multi: bool) -> bool:
    """Whether the grid pairs members with data sets (an axis named ``data_index``:
    per-member data); its values must index the list `data`."""
    name = _plan.DATA_AXIS
    if name not in grid.axes:
        return False
    values = np.asarray(grid.axes[name])
    if not multi:
        raise ValueError(f"grid axis {name!r} pairs each member with a data set of a list: pass "
                         "data as a list of data sets (or rename the axis).")
    if values.dtype.kind not in "iu" or values.min() < 0 or values.max() >= len(datasets):
        raise ValueError(f"grid axis {name!r} must hold integer indices into data "
                         f"(0 … {len(datasets) - 1}); got {values.tolist()[:8]}.")
    return True


def _stacked(dicts: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([d[k] for d in dicts]) for k in dicts[0]}


def _check_option_axes(grid: Grid, option_axes: tuple[str, ...]) -> None:
    """Every value of an option axis, by the rules of ``integrate`` itself (`FLOAT_OPTIONS`)."""
    for name in option_axes:
        for value in dict.fromkeys(grid.axes[name].tolist()):  # in grid order
            try:
                check_option(name, float(value))
            except ValueError as e:
                raise ValueError(f"grid axis {name!r} has the invalid value {value!r}: "
                                 f"{e}") from None


#: Members whose models are checked in one compiled call (bounds its memory).
_PROBE_BLOCK = 1024


@eqx.filter_jit
def _models_finite(build, params):
    """Per member, whether every floating-point leaf of ``build(**member)`` is finite."""
    def finite(p):
        leaves = jax.tree_util.tree_leaves(eqx.filter(build(**p), eqx.is_inexact_array))
        return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves] or [True]))

    return jax.vmap(finite)(params)


def _built_models(build, build_params: dict, grid: Grid) -> tuple:
    """The models of the grid's first and last members (concrete: they identify the sweep),
    after checking that `build` makes a model with finite parameters for every member; a
    member it cannot make is refused, naming the axis and value (`_refuse`). Runtime checks
    inside `build` (e.g. a shape outside (−1, 1)) give NaN per member here, not an error."""
    if not build_params:
        model = eqx.filter_jit(build)()
        return model, model
    size = grid.size
    block = min(size, _PROBE_BLOCK)
    ok = []
    with _checks.traced_errors_as_nan():
        for lo in range(0, size, block):
            index = np.minimum(np.arange(lo, lo + block), size - 1)  # one shape: one compile
            ok.append(np.asarray(_models_finite(build, {k: v[index] for k, v in
                                                        build_params.items()})))
        ok = np.concatenate(ok)[:size]
        if not ok.all():
            _refuse(build, build_params, grid, ~ok)
        ends = [eqx.filter_jit(build)(**{k: v[i] for k, v in build_params.items()})
                for i in (0, size - 1)]
    return tuple(ends)


def _refuse(build, build_params: dict, grid: Grid, bad: np.ndarray) -> None:
    """Raise a ValueError naming the grid values `build` cannot make a model from: an axis value
    all of whose members fail, else the failing members; with `build`'s own error for the
    first of them."""
    culprits = []
    for name, values in build_params.items():
        for value in np.unique(values):
            if bad[values == value].all():
                culprits.append(f"grid axis {name!r} has the invalid value {value.item()!r}")
    first = int(np.flatnonzero(bad)[0])
    member = {k: v[first].item() for k, v in build_params.items()}
    if not culprits:
        culprits = [f"{int(bad.sum())} of {grid.size} grid members are invalid, e.g. {member}"]
    try:
        build(**{k: np.asarray(v) for k, v in member.items()})
        reason = "build gives a model with non-finite parameters"
    except Exception as e:  # noqa: BLE001  (whatever build raises is the reason)
        reason = f"build raises {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    raise ValueError("; ".join(culprits) + f" ({reason} for {member}). Nothing was run: remove "
                     "these values from the grid.")


def _default_chunk(platform: str, size: int, compacting: bool, switching: bool = False) -> int:
    """Members per chunk: ``ACCELERATOR_CHUNK`` on an accelerator; on a CPU, `CPU_CHUNK` small
    batches of cost-sorted members (each waits for its slowest), `COMPACTING_CPU_CHUNK` where
    the batch compacts (`_compacting`: one large batch shares its matrix products), or
    `SWITCHING_CPU_CHUNK` for flows through kinks (`_through_kinks`)."""
    if platform != "cpu":
        return min(ACCELERATOR_CHUNK, size)
    if switching:
        return SWITCHING_CPU_CHUNK
    return min(COMPACTING_CPU_CHUNK, size) if compacting else CPU_CHUNK


def _dynamics(model, dataset: dict, integrate_options: dict):
    """The dynamics ``integrate`` builds for this model and data set (by the formulation)."""
    formulation = _integrate._formulation(integrate_options.get("formulation",
                                                                PreferReduction()))
    X, y = _checks.data(dataset["X"], dataset["y"])
    return type(formulation).dynamics(
        formulation, model, X, y, integrate_options.get("flow", GradientFlow()),
        integrate_options.get("loss", SquareLoss()))


def _through_kinks(dynamics) -> bool:
    """Whether ``integrate`` runs these dynamics through their kinks (its records then carry
    the kink counts)."""
    return isinstance(dynamics, AbstractSwitchingDynamics)


def _compacting(dynamics, integrate_options: dict, option_axes: tuple[str, ...] = ()) -> bool:
    """Whether ``integrate`` with these options ends these dynamics with a tail that compacts
    a vmapped batch (`AbstractTail.compacts`) and gives the explicit phase no work of its own
    (no ``stiff_switch`` set): then a batch's members do not wait for each other. An option
    swept as a grid axis (`option_axes`) counts as set."""
    options = integrate_options | {name: 1.0 for name in option_axes}
    tail = _integrate._stiff_solver(options.get("stiff_solver", "auto"), dynamics,
                                    options.get("save_at"), options.get("target_loss") is None,
                                    options.get("t_max") is not None)
    return tail is not None and tail.compacts and options.get("stiff_switch") is None


def _identity(build, ends, datasets, integrate_options, references, *, resumable) -> dict:
    """What determines the sweep's results, by content (docs/guarantees.md): hashed into the
    config hash, and written to sweep.json (options by value, each with its hash)."""
    def described(value, where):
        try:
            desc = identity.describe(value, where)
        except identity.Unidentifiable as e:
            if resumable:
                raise ValueError(f"{e}, so a sweep with out= could not be checked or resumed "
                                 "in another process. Use a function (def or lambda: "
                                 "identified by its code, closure values and the module-level "
                                 "values it reads), an Equinox module or plain values, or pass "
                                 "out=None.") from None
            desc = {"unidentified": str(e)}
        return {"value": desc, "sha256": identity.digest(desc)}

    models = described(tuple(ends), "the models of the grid's first and last members")
    return {
        "data_fingerprints": [_store.fingerprint(*ds.values()) for ds in datasets],
        "build": described(build, "build"),
        "models": {"type": f"{type(ends[0]).__module__}.{type(ends[0]).__qualname__}",
                   "sha256": models["sha256"]},
        "integrate_options": {k: described(v, k) for k, v in sorted(integrate_options.items())},
        "references": list(references),
        "versions": _versions(),
    }


def _metadata(plan, devices, multi) -> dict:
    return {
        "format": "ibflow-sweep/3", "config_hash": plan.config_hash, "config": plan.config,
        "dims": ["dataset"] * multi + list(plan.config["axes"]),
        "status_codes": {n: status_code(n) for n in STATUS_NAMES},
        "versions": _versions(), "git_commit": _store.git_commit(),
        "devices": [str(d) for d in devices], "platform": devices[0].platform,
    }


def _run(plan, executor, datasets, refs, store, progress, label) -> dict:
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
    bar = _progress(len(plan.work), len(plan.work) - len(todo), progress, label)
    n_dev = executor.n_devices
    rounds = []  # (group of chunks, their data set placed on the devices)
    for di in range(plan.n_datasets):
        mine = [t for t in todo if t[0] == di]
        placed = executor.place(datasets[di], refs[di]) if mine else None
        rounds += [(mine[i:i + n_dev], placed) for i in range(0, len(mine), n_dev)]

    def params(group):
        slots = group + [group[-1]] * (n_dev - len(group))
        index = np.concatenate([_padded(plan.chunks[ci], plan.chunk_size) for _, ci in slots])
        return plan.member_params(index)

    def compute(round_):
        group, placed = round_
        return executor.run(params(group), placed)

    def keep(group, result):
        for slot, (di, ci) in enumerate(group):
            idx, lo = plan.chunks[ci], slot * plan.chunk_size
            rec = {k: v[lo:lo + len(idx)] for k, v in result.items()} | {"index": idx}
            _check_record(rec, plan, di, ci)
            records[(di, ci)] = rec
            if store is not None:
                store.save_chunk(plan.number(di, ci), rec, config_hash=plan.config_hash,
                                 dataset=di)
            bar.update(1)

    # The first round alone (it compiles the program); the others, where the executor allows
    # (`Executor.decide_concurrency`), several at once, kept and saved in work order.
    for round_ in rounds[:1]:
        keep(round_[0], compute(round_))
    at_once = 1 if len(rounds) < 2 else executor.decide_concurrency(params(rounds[1][0]),
                                                                     rounds[1][1])
    for round_, result in zip(rounds[1:], _in_order(compute, rounds[1:], at_once)):
        keep(round_[0], result)
    bar.close()
    return records


def _in_order(fn, items, at_once: int):
    """``fn(item)`` for each item, in order, with at most `at_once` computed at the same time
    (threads; the next starts when the oldest is taken). If the consumer stops (an error, or
    Ctrl-C), the items not yet started are dropped: the threads finish only what they run."""
    if at_once < 2:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(at_once)
    pending = collections.deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) == at_once:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _check_record(rec: dict, plan, di: int, ci: int) -> None:
    """A computed chunk is what the plan says a chunk holds (the test a stored one must pass)."""
    problem = _store._chunk_problem(rec | {"config_hash": np.array(plan.config_hash),
                                           "dataset": np.array(di)}, plan.config_hash, di,
                                    plan.chunks[ci], plan.fields)
    if problem is not None:
        raise RuntimeError(f"ibflow bug: a computed sweep chunk {problem}.")


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
    return {"ibflow": __version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "diffrax": dfx.__version__, "equinox": eqx.__version__}


def _progress(total, done, enabled, label):
    """One bar per sweep, labelled by its results directory's name (or "sweep")."""
    return _bar(total, desc=label, unit="chunk", initial=done, progress=enabled)
