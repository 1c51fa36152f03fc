"""Traced programs kept across processes: ``jax.export`` artifacts next to JAX's compilation cache.

JAX's persistent compilation cache (`ibflow._cache`) stores compiled executables, but a new
process still *traces* the Python program before it can look one up: for a sweep of the
diagonal net that is ~3 s of Python (a vmapped Diffrax solve and a Newton loop), six times the
0.5 s the sweep then runs. `cached_call` skips the tracing: the first process exports the traced
and lowered program (``jax.export``, StableHLO) and writes it to disk; a later process with the
same program deserializes it and calls it, and the compilation cache supplies the executable.

The key must change whenever the program could. It is a hash of:
- the versions of JAX and its family, the platform, device kind and count, and the JAX
  settings that change tracing (x64, matmul precision, promotion rules, PRNG);
- the size and modification time of every source file of ibflow and of every other module
  loaded from outside the standard library and site-packages (the user's code: a build
  function that calls a helper in another file of theirs changes the key when either changes);
- the static part of the arguments (functions by module, name and bytecode, Equinox modules by
  type and field, plain values and arrays held in static fields by value: they are constants of
  the program; array arguments by shape, dtype and sharding).

Where a static argument cannot be fingerprinted this way (an object of unknown type, or code
defined in a session without a source file, such as a notebook cell), the call is not cached
and traces as usual. Not covered: a module-level variable changed at run time (a monkeypatched
constant), which JAX's own in-process cache does not see either.
"""

import functools
import hashlib
import os
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

#: Most artifacts kept; the least recently written are deleted beyond this.
MAX_ENTRIES = 64
#: Subdirectory of JAX's compilation cache directory holding the artifacts.
SUBDIR = "ibflow-traces"
#: Modules whose objects are fingerprinted by name (their versions are part of the key).
_LIBRARIES = ("builtins", "math", "operator", "functools", "numpy", "jax", "jaxlib", "equinox",
              "diffrax", "lineax", "optimistix", "optax", "jaxtyping", "ibflow")
_VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "optax", "numpy")

#: JAX settings that change what a program traces to.
_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
             "jax_numpy_dtype_promotion", "jax_default_prng_impl", "jax_debug_nans",
             "jax_disable_jit")
_loaded: dict[str, Callable] = {}
_refused: set[str] = set()


class _Uncacheable(Exception):
    pass


def directory() -> Path | None:
    """Where artifacts live: inside JAX's compilation cache directory; None when that is off."""
    base = jax.config.jax_compilation_cache_dir
    return Path(base) / SUBDIR if base else None


def _is_library(module: str) -> bool:
    return module.split(".")[0] in _LIBRARIES


@functools.cache
def _system_paths() -> tuple[str, ...]:
    """The standard library's and site-packages' directories, as given and resolved."""
    paths = sysconfig.get_paths()
    given = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    return tuple(dict.fromkeys(given + [os.path.realpath(p) for p in given]))


@functools.lru_cache(maxsize=1)
def _resolved_sources(loaded: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    """Resolved source paths of ibflow's modules and of the user's (outside the standard library
    and site-packages), from ``(name, __file__)`` of the loaded modules. Cached on that tuple, so
    paths are resolved again only when the loaded modules or their files change: resolving
    (``os.path.realpath`` lstat()s every component) made the scan ~10 ms of every sweep call."""
    system = _system_paths()
    paths = []
    for name, path in loaded:
        if not path or not path.endswith(".py"):
            continue
        ours = name.split(".")[0] == "ibflow"
        if not ours and path.startswith(system):  # cheap test first: most modules are here
            continue
        real = os.path.realpath(path)
        if ours or not real.startswith(system):
            paths.append(real)
    return tuple(sorted(set(paths)))


def _source_files() -> list[tuple[str, int, int]]:
    """``(path, size, mtime_ns)`` of ibflow's files and of the user's loaded modules (read on
    every call: an edited file changes the key)."""
    files = []
    loaded = tuple((name, getattr(module, "__file__", None))
                   for name, module in list(sys.modules.items()))
    for real in _resolved_sources(loaded):
        try:
            st = os.stat(real)
        except OSError:
            continue
        files.append((real, st.st_size, st.st_mtime_ns))
    return files


def _code(code: types.CodeType) -> tuple:
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else repr(c)
                   for c in code.co_consts)
    return (code.co_code.hex(), consts, code.co_names)


def _origin(obj) -> str:
    module = getattr(obj, "__module__", None) or ""
    if not _is_library(module):
        mod = sys.modules.get(module)
        if mod is None or not getattr(mod, "__file__", None):
            raise _Uncacheable(f"{obj!r} is defined without a source file")
    return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _fingerprint(x, depth=0):
    """A process-independent description of a static (non-array) argument."""
    if depth > 40:  # e.g. a function whose closure holds itself
        raise _Uncacheable("static argument nested too deeply")
    f = functools.partial(_fingerprint, depth=depth + 1)
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return (type(x).__name__, repr(x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(f(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), f(v)) for k, v in x.items())))
    if isinstance(x, (np.ndarray, jax.Array)):  # in the static part: a constant of the program
        data = np.ascontiguousarray(np.asarray(x))
        return ("array", x.shape, str(x.dtype), hashlib.sha256(data.tobytes()).hexdigest())
    if isinstance(x, (np.generic, np.dtype)):
        return ("numpy", repr(x))
    if isinstance(x, type):
        return ("type", _origin(x))
    if isinstance(x, eqx.Module):
        fields = tuple((name, f(getattr(x, name, None))) for name in
                       sorted(getattr(type(x), "__dataclass_fields__", {})))
        return ("module", _origin(type(x)), fields)
    if isinstance(x, types.MethodType):
        return ("method", f(x.__self__), x.__func__.__name__)
    if isinstance(x, types.FunctionType):  # by code too: lambdas share a qualified name
        cells = tuple(f(c.cell_contents) for c in (x.__closure__ or ()))
        return ("function", _origin(x), _code(x.__code__), cells, f(x.__defaults__),
                f(x.__kwdefaults__))
    if isinstance(x, functools.partial):
        return ("partial", f(x.func), f(x.args), f(x.keywords))
    if hasattr(type(x), "__members__") and hasattr(x, "name"):  # an Enum member
        return ("enum", _origin(type(x)), x.name)
    if _is_library(getattr(x, "__module__", None) or "") and hasattr(x, "__qualname__"):
        return ("named", _origin(x))  # e.g. jnp.tanh, a jitted library function
    raise _Uncacheable(f"cannot fingerprint {type(x).__name__}")


def _environment() -> tuple:
    versions = []
    for name in _VERSIONED:
        module = sys.modules.get(name)
        versions.append((name, getattr(module, "__version__", None)))
    device = jax.devices()[0]
    settings = tuple(str(getattr(jax.config, name, None)) for name in _SETTINGS)
    return (tuple(versions), device.platform, device.device_kind, jax.device_count(), settings,
            tuple(_source_files()))


def _leaf_spec(a) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(a, "sharding", None))


def _evict(folder: Path) -> None:
    entries = sorted(folder.glob("*.exported"), key=lambda p: p.stat().st_mtime)
    for old in entries[:-MAX_ENTRIES]:
        old.unlink(missing_ok=True)


def _platform(leaves) -> str | None:
    """The export platform (``cpu``, ``cuda``, ...) of the devices the call's arrays live on;
    None when they span several platforms or one that is neither CPU nor the default backend
    (then the call is traced as usual). A program exported for one platform cannot run on
    another, so this is part of the key: a sweep on ``jax.devices("cpu")`` in a process whose
    default backend is a GPU must not load the GPU's program."""
    found = {d.platform for a in leaves if isinstance(a, jax.Array) for d in a.devices()}
    found = found or {jax.default_backend()}
    if len(found) != 1:
        return None
    (platform,) = found
    if platform == jax.default_backend():
        return jax.export.default_export_platform()
    return "cpu" if platform == "cpu" else None


def _export(fn, static, treedef, leaves, path: Path, platform: str) -> Callable:
    def flat(*arrays):
        bound, args = jax.tree_util.tree_unflatten(treedef, arrays)
        return fn(*eqx.combine(bound, static), *args)

    exported = jax.export.export(jax.jit(flat), platforms=(platform,))(
        *[_leaf_spec(a) for a in leaves])
    try:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(exported.serialize())
        os.replace(tmp, path)
        _evict(path.parent)
    except OSError:  # a read-only cache directory: this process still uses the export
        pass
    return jax.jit(exported.call)


class TraceCache:
    """``fn(*bound, *args)`` with the traced program kept across processes (module docstring).
    `fn` must be traceable with its array leaves abstract, and return a pytree of arrays. The
    `bound` arguments (functions, options: the same for every call) are fingerprinted once; each
    call passes arrays only (pytrees of them)."""

    def __init__(self, name: str, fn: Callable, *bound):
        self.name, self.fn, self.bound = name, fn, bound
        self.folder = directory()
        self._arrays, self._static = eqx.partition(bound, eqx.is_array)
        self._base = None  # hash of name, environment and the static part; False: uncacheable

    def _base_key(self):
        if self._base is None:
            try:
                self._base = repr((self.name, _environment(), _fingerprint(self._static)))
            except _Uncacheable:
                self._base = False
        return self._base

    def __call__(self, *args):
        if self.folder is None or not self._base_key():
            return self.fn(*self.bound, *args)
        leaves, treedef = jax.tree_util.tree_flatten((self._arrays, args))
        platform = _platform(leaves)
        if platform is None:
            return self.fn(*self.bound, *args)
        specs = tuple((a.shape, str(a.dtype), str(getattr(a, "sharding", None))) for a in leaves)
        # The bound arguments' structure is in the base key (their fingerprint); the calls'
        # structure (dicts and tuples of arrays) prints without addresses.
        structure = str(jax.tree_util.tree_structure(args))
        digest = hashlib.sha256(repr((self._base, platform, structure, specs)).encode()).hexdigest()
        if digest in _refused:
            return self.fn(*self.bound, *args)
        call = _loaded.get(digest)
        if call is None:
            path = self.folder / f"{digest}.exported"
            self.folder.mkdir(parents=True, exist_ok=True)
            try:
                call = jax.jit(jax.export.deserialize(bytearray(path.read_bytes())).call)
            except Exception:  # noqa: BLE001  (absent or unreadable: trace and write it again)
                try:
                    call = _export(self.fn, self._static, treedef, leaves, path, platform)
                except Exception:  # noqa: BLE001  (not exportable: trace as usual; an error
                    _refused.add(digest)  # of `fn` itself is then raised by that call)
                    return self.fn(*self.bound, *args)
            _loaded[digest] = call
        return call(*leaves)
