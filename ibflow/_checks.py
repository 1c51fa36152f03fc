"""Input validation that works both eagerly (clear ``ValueError``) and under ``jit``/``vmap``.

Concrete arrays are checked in Python and raise ``ValueError`` naming the problem. Traced values
cannot be inspected at trace time, so the same check becomes an ``eqx.error_if`` runtime check
(docs/architecture.md, "Errors").
"""

import contextlib
import contextvars

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

_ON_ERROR = contextvars.ContextVar("ibflow_on_error", default="default")


@contextlib.contextmanager
def traced_errors_as_nan():
    """Within this context, a failed runtime check on a traced value returns NaN where it
    failed, elementwise, so only the failing member of a vmapped batch (its status then says
    `nonfinite`), instead of raising through a host callback. Sweeps trace their
    batch in it: one bad member does not stop the batch, and a program without host callbacks
    can be stored in JAX's persistent compilation cache (one with them never is)."""
    token = _ON_ERROR.set("nan")
    try:
        yield
    finally:
        _ON_ERROR.reset(token)


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def eager_if_concrete(fn, *args):
    """``fn(*args)``, evaluated at once (not traced) when no argument is a tracer.

    Inside an outer ``jit`` (or ``vmap``/``grad``), even ``jnp.asarray`` of a constant returns
    a tracer, and every check on it would become a run-time ``error_if``: a host callback
    traced, compiled and run on each call (a program with one is also never stored in JAX's
    persistent compilation cache). Computed concretely, a bad constant raises ``ValueError``
    at once and the compiled program carries no check for it."""
    if any(is_traced(a) for a in jax.tree_util.tree_leaves(args)):
        return fn(*args)
    with jax.ensure_compile_time_eval():
        return fn(*args)


def as_array(x, dtype=None):
    """``jnp.asarray(x, dtype)``, concrete when `x` is (`eager_if_concrete`)."""
    return eager_if_concrete(lambda a: jnp.asarray(a, dtype=dtype), x)


def _check(x, bad_fn, message: str):
    """Raise ``ValueError(message)`` where ``bad_fn(x)`` holds; returns ``x`` (possibly wrapped)."""
    if is_traced(x):
        bad = bad_fn(jnp.asarray(x))
        if _ON_ERROR.get() == "nan" and jnp.issubdtype(jnp.result_type(x), jnp.inexact):
            # Elementwise, so per member under vmap: `eqx.error_if(..., on_error="nan")` reduces
            # its predicate over the whole batch (``unvmap_any``), which turned every member of
            # a sweep chunk into NaN when one of them failed a check.
            return jnp.where(bad, jnp.nan, x)
        return eqx.error_if(x, bad, message, on_error=_ON_ERROR.get())
    if bool(np.any(bad_fn(np.asarray(x)))):
        raise ValueError(message)
    return x


def finite(x, name: str):
    return _check(x, lambda a: ~jnp.isfinite(a) if is_traced(a) else ~np.isfinite(a),
                  f"{name} contains non-finite values (nan or inf); clean the data first.")


def positive(x, name: str):
    return _check(x, lambda a: ~(a > 0), f"{name} must be > 0 (got a value <= 0 or nan).")


def positive_finite(x, name: str):
    """``0 < x < inf`` (nan refused), eagerly or at run time."""
    return _check(x, lambda a: ~((a > 0) & (a < jnp.inf)),
                  f"{name} must be > 0 and finite (got a value <= 0, inf or nan).")


def in_open_interval(x, lo: float, hi: float, name: str):
    return _check(x, lambda a: ~((a > lo) & (a < hi)),
                  f"{name} must lie in the open interval ({lo}, {hi}).")


def in_half_open_interval(x, lo: float, hi: float, name: str):
    return _check(x, lambda a: ~((a > lo) & (a <= hi)),
                  f"{name} must lie in ({lo}, {hi}].")


def real_array(x, name: str, *, ndim: int | None = None, allow_empty: bool = False):
    """``x`` as a real floating array. Integer and boolean arrays are converted to float64 (one
    convention everywhere); complex, string and object arrays are refused, as are arrays with a
    wrong number of dimensions and (unless `allow_empty`) empty ones, each with a ``ValueError``
    naming `name`. Finiteness is checked separately (`finite`)."""
    if not is_traced(x) and not isinstance(x, jax.Array):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError) as e:  # ragged lists and the like
            raise ValueError(f"{name} must be a numeric array; could not convert it ({e}).") \
                from None
    dtype = np.dtype(x.dtype)
    if dtype.kind == "c":
        raise ValueError(f"{name} is complex ({dtype}); ibflow works with real data only. Pass "
                         f"the real part explicitly if that is what you mean.")
    if dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real numeric array; got dtype {dtype}.")
    if ndim is not None and x.ndim != ndim:
        shape = "(n, d)" if ndim == 2 else "(n,)" if ndim == 1 else f"{ndim}-d"
        raise ValueError(f"{name} must be a {ndim}-d array of shape {shape}; got shape "
                         f"{tuple(x.shape)}.")
    if not allow_empty and x.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}).")
    if dtype.kind == "f" and isinstance(x, jax.Array):
        return x  # already what `as_array` would return (it dispatches to the device per array)
    return as_array(x, float if dtype.kind in "biu" else None)


def real_scalar(x, name: str, *, positive: bool = False, nonnegative: bool = False):
    """A finite real scalar (Python number or 0-d array), refused by name otherwise; traced
    values are checked at run time."""
    x = real_array(x, name, ndim=0)
    x = finite(x, name)
    if positive:
        x = _check(x, lambda a: ~(a > 0), f"{name} must be > 0.")
    if nonnegative:
        x = _check(x, lambda a: ~(a >= 0), f"{name} must be >= 0.")
    return x


def switch_budget(max_switches):
    """`max_switches` (an integer ≥ 1, or traced) as an array leaf of the solve's options."""
    if is_traced(max_switches):
        return jnp.asarray(max_switches)
    return np.asarray(width(max_switches, "max_switches"))


def data(X, y):
    """Validate a regression/classification data set: real ``X`` (n, d) and ``y`` (n,), finite,
    non-empty (integer data are converted to float64; complex data are refused)."""
    X = real_array(X, "X", ndim=2, allow_empty=True)
    y = real_array(y, "y", ndim=1, allow_empty=True)
    if X.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and y disagree on the number of examples: X has {X.shape[0]} rows, y has "
            f"{y.shape[0]} entries."
        )
    if X.shape[0] == 0:
        raise ValueError("the data set is empty (n = 0): X and y need at least one example.")
    if X.shape[1] == 0:
        raise ValueError("X has no columns (d = 0).")
    return finite(X, "X"), finite(y, "y")


def width(k, name: str = "width", *, low: int = 1) -> int:
    """A Python/numpy integer >= `low` (booleans are refused), as an ``int``: the one check of
    every count option (widths, dimensions, step budgets, checkpoints, grid sizes)."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)) or k < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {k!r}.")
    return int(k)


def predictor_roundoff(model, *, probes: int = 16):
    """Rounding-error scale of ``model.predictor()`` in float64, per coordinate (d,).

    ``ε · sqrt(Σ_j (∂w/∂θ_j · θ_j)²)``, estimated from `probes` Jacobian-vector products with
    tangents ``θ ∘ r`` (``r`` Rademacher, fixed key: deterministic). For a predictor built from
    products of parameters (``u₊v₊ − u₋v₋``, ``W₁ᵀa``, ``a·w``) each ``∂w/∂θ_j · θ_j`` is one of
    the products that the predictor adds up, so this is the size of the terms that cancel:
    when it is comparable to the predictor itself (e.g. a diagonal net at scale α = 1e30, terms
    ≈ 1e30 cancelling to O(1)), the predictor has lost its digits and so has any loss computed
    from it. Works for any model with a ``predictor()``; jit/vmap-able.
    """
    params, static = eqx.partition(model, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)

    def predictor(p):
        return eqx.combine(p, static).predictor()

    def jvp(key):
        keys = jax.random.split(key, len(leaves))
        tangent = [jax.random.rademacher(k, jnp.shape(x), dtype=jnp.result_type(x)) * x
                   for k, x in zip(keys, leaves, strict=True)]
        return jax.jvp(predictor, (params,), (jax.tree_util.tree_unflatten(treedef, tangent),))[1]

    t = jax.vmap(jvp)(jax.random.split(jax.random.key(0), probes))
    eps = jnp.finfo(t.dtype).eps
    return eps * jnp.sqrt(jnp.mean(t**2, axis=0))


def square_loss_floor(model, X):
    """``½ mean((|X| δw)²)`` with ``δw = predictor_roundoff(model)``: below this, a square loss
    computed from ``model.predictor()`` is rounding noise and cannot certify convergence."""
    dw = predictor_roundoff(model)
    return 0.5 * jnp.mean((jnp.abs(X) @ dw) ** 2)
