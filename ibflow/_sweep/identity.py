"""A sweep's identity by content: what determines its results, hashed and shown in sweep.json.

`describe` maps a value to a JSON value that says what it is (numbers by value, arrays by shape,
dtype and the SHA-256 of their bytes, Equinox modules by type and every field, functions by
qualified name, code, closure values, defaults and the module-level values their code reads).
Its canonical JSON is the value's identity (`digest`): the same in every process, and different
whenever anything the value computes with differs. A value that cannot be described this way (an
object of an unknown type) raises `Unidentifiable` naming where it sits; a sweep then refuses
``out=`` (it could never be resumed or checked) and still runs without it.
"""

import enum
import functools
import hashlib
import json
import math
import types

import equinox as eqx
import jax
import numpy as np

#: Arrays up to this many entries are written to sweep.json by value (larger ones by hash).
INLINE_ENTRIES = 64
_DEPTH = 40


class Unidentifiable(Exception):
    """A value without a process-independent description (the message says which and where)."""


def number(x):
    """A JSON number, or for a non-finite float the string ``"nan"``, ``"inf"`` or ``"-inf"``
    (strict JSON has no non-finite numbers; docs/guarantees.md)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _array(x) -> dict:
    a = np.ascontiguousarray(np.asarray(x))
    if a.dtype.kind not in "biufc":
        raise Unidentifiable(f"an array of dtype {a.dtype}")
    out = {"array": list(a.shape), "dtype": a.dtype.str, "sha256": _sha(a.tobytes())}
    if a.size <= INLINE_ENTRIES and a.dtype.kind != "c":
        out["values"] = [number(v) for v in a.ravel().tolist()]
    return out


def _name(obj) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"


def _code(code: types.CodeType) -> dict:
    def const(c):
        if isinstance(c, types.CodeType):
            return _code(c)
        if isinstance(c, frozenset):  # iteration order follows string hashing: per process
            return sorted(repr(v) for v in c)
        return repr(c)

    return {"bytecode": _sha(code.co_code), "consts": [const(c) for c in code.co_consts],
            "names": list(code.co_names)}


def _read_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _read_names(c)
    return names


def describe(x, _where: str = "value", _depth: int = 0, _seen: frozenset = frozenset()):
    """A JSON description of `x` that identifies it across processes (module docstring)."""
    if _depth > _DEPTH or id(x) in _seen:
        return {"recursive": _name(type(x))}
    seen = _seen | {id(x)}
    d = functools.partial(_describe_in, depth=_depth + 1, seen=seen)
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return {"float": number(x)} if not math.isfinite(x) else x
    if isinstance(x, (np.ndarray, jax.Array, np.generic)):
        if isinstance(x, jax.core.Tracer):
            raise Unidentifiable(f"{_where} is traced")
        return _array(x)
    if isinstance(x, (tuple, list)):
        return {type(x).__name__: [d(v, f"{_where}[{i}]") for i, v in enumerate(x)]}
    if isinstance(x, dict):
        return {"dict": [[repr(k), d(v, f"{_where}[{k!r}]")]
                         for k, v in sorted(x.items(), key=lambda kv: repr(kv[0]))]}
    if isinstance(x, enum.Enum):
        return {"enum": _name(type(x)), "name": x.name}
    if isinstance(x, type):
        return {"type": _name(x)}
    if isinstance(x, eqx.Module):
        fields = sorted(getattr(type(x), "__dataclass_fields__", {}))
        return {"module": _name(type(x)),
                "fields": {f: d(getattr(x, f, None), f"{_where}.{f}") for f in fields}}
    if isinstance(x, functools.partial):
        return {"partial": d(x.func, f"{_where}.func"), "args": d(x.args, f"{_where}.args"),
                "keywords": d(x.keywords, f"{_where}.keywords")}
    if isinstance(x, types.MethodType):
        return {"method": x.__func__.__qualname__, "self": d(x.__self__, f"{_where}.__self__"),
                "function": d(x.__func__, f"{_where}.__func__")}
    if isinstance(x, types.FunctionType):
        return _function(x, _where, d)
    if isinstance(x, types.ModuleType):
        return {"python_module": x.__name__}
    if isinstance(x, (types.BuiltinFunctionType, np.ufunc)) or (
            callable(x) and getattr(x, "__module__", "").split(".")[0] in _LIBRARIES):
        return {"library_callable": _name(x), "name": getattr(x, "__name__", None)}
    if callable(x) and hasattr(x, "__wrapped__"):  # functools.wraps, jax.jit
        return {"wrapper": _name(type(x)), "wrapped": d(x.__wrapped__, f"{_where}.__wrapped__")}
    raise Unidentifiable(f"{_where} is a {type(x).__module__}.{type(x).__qualname__}, which "
                         "ibflow cannot identify across processes")


#: Callables of these packages are identified by name (their versions enter the identity).
_LIBRARIES = ("numpy", "jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "optax",
              "ibflow", "math", "operator", "builtins", "functools")


def _describe_in(x, where, *, depth, seen):
    return describe(x, where, depth, seen)


def _function(fn: types.FunctionType, where: str, d) -> dict:
    """A function by its code, closure values, defaults and the module-level values its code
    reads: a build reading a module constant set from the environment is another build when the
    constant differs. A library function is identified by its qualified name."""
    if (fn.__module__ or "").split(".")[0] in _LIBRARIES:
        return {"library_callable": _name(fn)}
    closure = {name: d(cell.cell_contents, f"{where} closure {name!r}")
               for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())}
    reads = {}
    for name in sorted(_read_names(fn.__code__)):
        if name in fn.__globals__:
            reads[name] = d(fn.__globals__[name], f"{where} global {name!r}")
    return {"function": _name(fn), "code": _code(fn.__code__), "closure": closure,
            "defaults": d(fn.__defaults__, f"{where} defaults"),
            "kwdefaults": d(fn.__kwdefaults__, f"{where} keyword defaults"), "globals": reads}


def canonical(value) -> str:
    """The canonical (strict) JSON text of a JSON value."""
    return json.dumps(value, sort_keys=True, allow_nan=False, separators=(",", ":"))


def digest(value) -> str:
    """SHA-256 (16 hex digits) of a JSON value's canonical text."""
    return _sha(canonical(value).encode())[:16]
