"""Pure planning of a sweep: which axes go where, member order, chunks and the config hash.

Nothing here does I/O or compiles: every function maps Python/NumPy values (and pytrees, only
flattened) to Python/NumPy values.
"""

import dataclasses
import inspect
from collections.abc import Callable

import numpy as np

from . import identity as _identity
from .grid import Grid

#: ``integrate`` options that cannot be arrays (a Python int budget, Modules, strings, flags):
#: a grid axis with one of these names is refused; as a keyword they pass through unchanged.
STATIC_OPTIONS = ("max_steps", "solver", "stiff_solver", "adjoint", "flow", "loss", "method",
                  "save_at", "throw", "progress")


def integrate_options(integrate: Callable) -> tuple[str, ...]:
    """The keyword-only parameters of ``integrate``, read from its signature (no copied list)."""
    params = inspect.signature(integrate).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def sweepable_options(integrate: Callable) -> tuple[str, ...]:
    """The options that can be traced per member: annotated as a scalar float array
    (``Float[ArrayLike, ""]``) and not in `STATIC_OPTIONS`. A new option of that type becomes
    sweepable without editing this module; a new Module-valued option is refused."""
    params = inspect.signature(integrate).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
                 and p.name not in STATIC_OPTIONS
                 and "Float[" in str(p.annotation) and "''" in str(p.annotation))


def build_parameters(build: Callable) -> frozenset[str] | None:
    """The keyword names `build` accepts, or None when it takes ``**kwargs`` or has no signature."""
    try:
        params = inspect.signature(build).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def check_options(given: dict, options: tuple[str, ...]) -> None:
    """Every keyword of ``sweep`` beyond its own goes to ``integrate``: refuse unknown names."""
    for name in given:
        if name not in options:
            raise ValueError(f"{name!r} is not an option of ibflow.integrate (its options: "
                             f"{', '.join(options)}).")
    if "throw" in given:
        raise ValueError("'throw' cannot be passed to a sweep: members never raise, each "
                         "reports its own status.")


#: The grid axis that pairs each member with a data set of the list given to ``sweep``
#: (per-member data: one teacher per seed); an argument of `build` too where it takes one.
DATA_AXIS = "data_index"


def split_axes(grid: Grid, options: tuple[str, ...], sweepable: tuple[str, ...], given: dict,
               build_params: frozenset[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(build_axes, option_axes)``: axes named like a sweepable ``integrate`` option are
    passed to it per member (as float arrays); every other axis is an argument of `build`, but
    `DATA_AXIS`, which is one only where `build` names it (or takes ``**kwargs``)."""
    build_axes, option_axes = [], []
    for name in grid.axes:
        if name in given:
            raise ValueError(f"{name!r} is both a grid axis and a keyword argument of sweep.")
        if name == DATA_AXIS:
            if build_params is None or name in build_params:
                build_axes.append(name)
            continue
        if name in STATIC_OPTIONS or (name in options and name not in sweepable):
            raise ValueError(f"grid axis {name!r} names an integrate option that cannot be an "
                             f"array; pass {name}=... once as a keyword, or sweep in a loop.")
        if name in options:
            option_axes.append(name)
        elif build_params is not None and name not in build_params:
            raise ValueError(f"grid axis {name!r} is neither an option of ibflow.integrate nor "
                             f"a parameter of build (which takes {sorted(build_params)}).")
        else:
            build_axes.append(name)
    return tuple(build_axes), tuple(option_axes)


def chunked(order: np.ndarray, chunk_size: int) -> tuple[np.ndarray, ...]:
    """Consecutive runs of ``chunk_size`` members of ``order`` (the last one may be short)."""
    order = np.asarray(order, dtype=np.int64)
    return tuple(order[i:i + chunk_size] for i in range(0, len(order), chunk_size))


def config_hash(config: dict) -> str:
    """SHA-256 (16 hex digits) of the configuration's canonical strict JSON: chunks carry it,
    resume checks it, and `open_sweep` recomputes it from sweep.json (an edited file fails)."""
    return _identity.digest(config)


#: Scalar per-member fields and their dtypes (every other field has a trailing axis).
_SCALAR_FIELDS = {"loss": "<f8", "steps": "<i8", "time": "<f8", "status": "<i4",
                  "test_error": "<f8", "switches": "<i8", "slides": "<i8", "sliding_time": "<f8"}


def expected_fields(has_test: bool, predictor: bool, references: tuple[str, ...], *,
                    kinks: bool, n_parameters: int, dim: int) -> dict[str, list]:
    """The per-member fields a chunk records (the executor writes exactly these), each as
    ``[dtype, trailing shape]``: a chunk entry must have shape ``(members, *trailing)``."""
    names = ["loss", "steps", "time", "status"] + ["test_error"] * has_test
    fields = {name: [_SCALAR_FIELDS[name], []] for name in names}
    fields["parameters"] = ["<f8", [n_parameters]]
    if predictor:
        fields["predictor"] = ["<f8", [dim]]
        fields |= {f"distance_{r}": ["<f8", []] for r in references}
    if kinks:
        fields |= {name: [_SCALAR_FIELDS[name], []] for name in ("switches", "slides",
                                                                   "sliding_time")}
    return fields


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a sweep computes: members (flat, per axis), their chunks, and the identity of the run.

    Work items are ``(dataset, chunk)`` pairs; chunk file number = ``dataset·len(chunks) + chunk``.
    """

    members: dict[str, np.ndarray]
    option_axes: tuple[str, ...]
    chunks: tuple[np.ndarray, ...]
    chunk_size: int
    n_datasets: int
    fields: dict[str, list]
    config: dict
    config_hash: str

    @property
    def work(self) -> list[tuple[int, int]]:
        return [(di, ci) for di in range(self.n_datasets) for ci in range(len(self.chunks))]

    def number(self, di: int, ci: int) -> int:
        return di * len(self.chunks) + ci

    def member_params(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Per-axis values of the members ``index``; option axes as float64 (traced options)."""
        return {k: (v[index].astype(np.float64) if k in self.option_axes else v[index])
                for k, v in self.members.items()}


def make_plan(grid: Grid, *, order: np.ndarray, chunk_size: int, n_datasets: int,
              option_axes: tuple[str, ...], fields: dict[str, list], identity: dict) -> Plan:
    """The plan of a sweep; `identity` (build, data fingerprints, options...) enters the hash."""
    order = np.asarray(order)
    if sorted(order.tolist()) != list(range(grid.size)):
        raise ValueError("order must return a permutation of the grid's members.")
    chunks = chunked(order, chunk_size)
    config = dict(identity) | {
        "axes": grid.describe(), "datasets": n_datasets, "option_axes": list(option_axes),
        "chunk_size": chunk_size, "chunks": [c.tolist() for c in chunks], "fields": dict(fields),
    }
    return Plan(grid.members(), option_axes, chunks, chunk_size, n_datasets, fields, config,
                config_hash(config))
