"""Traced solves kept across processes: the program of `ibflow._engine.solve` for one
configuration, exported (`jax.export`) to a file next to JAX's persistent compilation cache.

JAX's persistent cache keeps compiled executables, but finding one takes the program: a new
process still traces and lowers the solve first, 2–3 s of Python for a flow through kinks
(benchmarks/results/compile.md), more than the cached executable takes to load. An exported
program is the traced and lowered solve itself: a later process with the same configuration
reads it (milliseconds), and its compilation then hits JAX's cache, so the first call of that
process costs the executable's load, not a trace.

A program is stored only where its key pins everything that shaped the trace:

- the configuration: the static part of the arguments (`ibflow._engine._Skeleton`: the PyTree
  structure and its non-array leaves, pickled) and each array leaf's shape, dtype, weak type and
  devices. Every class and function the pickle names must come from a versioned package
  (ibflow, the JAX stack, numpy) or the standard library: a model class written by the user (a
  notebook's, a script's) can change between processes without any version changing, so such a
  configuration is traced as before, never read from a file;
- the code: the digest of ibflow's own source files (an editable install changes without its
  version), the versions of JAX, jaxlib, Equinox, Diffrax, Lineax, Optimistix, Optax, jaxtyping
  and numpy, the Python version, the backend and its devices;
- the settings that change a trace: float64, the default matmul precision, dtype promotion,
  ``jax_debug_nans`` / ``jax_debug_infs`` and ``EQX_ON_ERROR``.

Only calls at the top level use it (concrete arrays, jit enabled): inside ``jit``, ``vmap`` or
``grad`` the solve is part of the caller's program. A solve that cannot be exported (host
callbacks: a progress bar) runs as before. A file that cannot be read is ignored and rewritten.
The directory keeps the `MAX_PROGRAMS` most recently used programs.
"""

import functools
import hashlib
import importlib.metadata
import io
import os
import pickle
import sys
import types
from pathlib import Path

import jax

from . import _cache

try:  # Equinox's marker of an unset field (private; pinned with Equinox's version)
    from equinox._module._flatten import MISSING as _EQX_MISSING
except ImportError:  # another layout: its structures then fail the round-trip check
    _EQX_MISSING = object()

#: Bumped when the file's layout or the key's meaning changes.
FORMAT = 1
#: Programs kept in the directory (least recently used ones are removed; ~0.2–1 MB each).
MAX_PROGRAMS = 256
SUFFIX = ".ibflow-program"
#: Distributions whose versions enter the key; their modules may appear in a configuration.
_VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "optax",
              "jaxtyping", "numpy", "ml_dtypes")
_TRUSTED = frozenset({"ibflow", "jaxlib", "ml_dtypes", *_VERSIONED}) | sys.stdlib_module_names


def directory() -> Path | None:
    """Where programs are kept: ``ibflow-programs`` in JAX's persistent-cache directory when
    ibflow's cache setting is on (`ibflow._cache`), else None (off)."""
    if _cache.cache_dir_from_environment() is None:
        return None
    configured = jax.config.jax_compilation_cache_dir
    return Path(configured) / "ibflow-programs" if configured else None


class _Unstable(Exception):
    """The configuration names code that no version pins."""


#: Singletons that PyTree structures compare by identity, written by name (persistent ids).
#: (Equinox's marker of an unset field; the skeletons' array marker is added per call.)
_SINGLETONS = {"eqx-missing": _EQX_MISSING}


class _KeyPickler(pickle.Pickler):
    """Pickles a skeleton and refuses every class or function outside `_TRUSTED` packages;
    `array` (the skeleton's array marker) and `_SINGLETONS` are written as persistent ids."""

    def __init__(self, file, array):
        super().__init__(file, protocol=5)
        self._array = array

    def persistent_id(self, obj):
        if obj is self._array:
            return "array"
        for name, singleton in _SINGLETONS.items():
            if obj is singleton:
                return name
        # (A partial or a bound method is pickled by value: its function and object's class
        # come through here in turn.)
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            module = getattr(obj, "__module__", None) or ""
            if module.split(".")[0] not in _TRUSTED:
                raise _Unstable(module)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, array):
        super().__init__(file)
        self._array = array

    def persistent_load(self, pid):
        if pid == "array":
            return self._array
        if pid in _SINGLETONS:
            return _SINGLETONS[pid]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def _dumps(obj, array) -> bytes:
    buffer = io.BytesIO()
    _KeyPickler(buffer, array).dump(obj)
    return buffer.getvalue()


@functools.cache
def _code_fingerprint() -> bytes:
    """ibflow's source digest, the versions of its stack, Python's, the backend's."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    versions = []
    for name in _VERSIONED:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((name, None))
    devices = tuple((d.platform, d.device_kind) for d in jax.devices())
    return pickle.dumps((FORMAT, digest.hexdigest(), versions, sys.version_info[:3],
                         jax.default_backend(), devices))


def _settings() -> tuple:
    config = jax.config
    return (config.jax_enable_x64, str(config.jax_default_matmul_precision),
            config.jax_numpy_dtype_promotion, config.jax_debug_nans, config.jax_debug_infs,
            os.environ.get("EQX_ON_ERROR"))


def _aval(a) -> tuple:
    aval = jax.typeof(a)
    devices = (tuple(sorted(d.id for d in a.devices())) if isinstance(a, jax.Array)
               else None)
    return aval.shape, str(aval.dtype), bool(getattr(aval, "weak_type", False)), devices


class _Program:
    """A loaded program: its compiled call (``jax.jit`` of the exported function) and the
    result's skeleton."""

    def __init__(self, exported, result):
        def solve(arrays):  # the compiled module is "jit_solve", as the traced one's
            return exported.call(arrays)

        self.call = jax.jit(solve)
        self.result = result


#: (argument skeleton, array avals) → its `_Program`, or None where the cache does not apply.
_LOADED: dict = {}


def run(compiled, arrays, skeleton, results):
    """``(compiled(arrays, skeleton), result skeleton)``: through the program cache where it
    applies, else (no directory; a call inside a trace; jit disabled; a configuration no
    version pins; a solve that cannot be exported) by calling `compiled`.

    `compiled`: the engine's ``jax.jit`` (static `skeleton`, an `ibflow._engine._Skeleton`),
    which records each traced configuration's result skeleton in `results`."""
    program = None
    if not (any(isinstance(a, jax.core.Tracer) for a in arrays) or jax.config.jax_disable_jit):
        avals = tuple(_aval(a) for a in arrays)
        memory_key = (skeleton, avals)
        if memory_key not in _LOADED:
            _LOADED[memory_key] = _load_or_export(compiled, arrays, skeleton, avals, results)
        program = _LOADED[memory_key]
    if program is None:
        out = compiled(arrays, skeleton)  # traces (and records `results`) first
        return out, results[skeleton]
    return program.call(arrays), program.result


def _load_or_export(compiled, arrays, skeleton, avals, results):
    folder = directory()
    kind = type(skeleton)
    array_marker = kind.ARRAY
    if folder is None:
        return None
    try:
        configuration = _dumps((skeleton.treedef, skeleton.leaves), array_marker)
    except Exception:  # noqa: BLE001 - _Unstable, or a leaf pickle cannot write (a lambda)
        return None
    key = hashlib.sha256(pickle.dumps((_code_fingerprint(), _settings(), avals)) +
                         configuration).hexdigest()
    path = folder / (key + SUFFIX)
    program = _read(path, kind)
    if program is not None:
        return program
    try:
        exported = jax.export.export(compiled)(arrays, skeleton)
        blob = bytes(exported.serialize())
        result = results[skeleton]
        parts = _dumps((result.treedef, result.leaves), array_marker)
        # Stored only if it reads back as the same structure (a leaf that pickle copies but
        # code compares by identity would not).
        if _parts(parts, array_marker) != (result.treedef, result.leaves):
            return None
        stored = pickle.dumps((FORMAT, blob, parts))
    except Exception:  # noqa: BLE001 - not exportable (host callbacks, ...): trace as before
        return None
    _write(folder, path, stored)
    # Run the program as a later process will (deserialized), so that both compile the same
    # module and the later one finds it in JAX's cache.
    return _Program(jax.export.deserialize(bytearray(blob)), result)


def _parts(data: bytes, array_marker) -> tuple:
    treedef, leaves = _Unpickler(io.BytesIO(data), array_marker).load()
    return treedef, tuple(leaves)


def _read(path: Path, kind) -> "_Program | None":
    """The program stored at `path` with its result skeleton (of class `kind`), or None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        version, blob, result = pickle.loads(data)
        if version != FORMAT:
            return None
        program = _Program(jax.export.deserialize(bytearray(blob)),
                           kind.of_parts(*_parts(result, kind.ARRAY)))
    except Exception:  # noqa: BLE001 - a damaged or foreign file: trace and rewrite it
        return None
    try:
        os.utime(path)  # most recently used
    except OSError:
        pass
    return program


def _write(folder: Path, path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (a reader never sees a partial file), then keep the
    `MAX_PROGRAMS` most recently used programs. Never raises: a program not written is traced
    again next time."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
        programs = sorted(folder.glob("*" + SUFFIX), key=lambda p: p.stat().st_mtime)
        for old in programs[:-MAX_PROGRAMS]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
