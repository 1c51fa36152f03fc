"""Input validation that works both eagerly (clear ``ValueError``) and under ``jit``/``vmap``.

Concrete arrays are checked in Python and raise ``ValueError`` naming the problem. Traced values
cannot be inspected at trace time, so the same check becomes an ``eqx.error_if`` runtime check
(STYLE.md, "Errors").
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check(x, bad_fn, message: str):
    """Raise ``ValueError(message)`` where ``bad_fn(x)`` holds; returns ``x`` (possibly wrapped)."""
    if is_traced(x):
        return eqx.error_if(x, bad_fn(jnp.asarray(x)), message)
    if bool(np.any(bad_fn(np.asarray(x)))):
        raise ValueError(message)
    return x


def finite(x, name: str):
    return _check(x, lambda a: ~jnp.isfinite(a) if is_traced(a) else ~np.isfinite(a),
                  f"{name} contains non-finite values (nan or inf); clean the data first.")


def positive(x, name: str):
    return _check(x, lambda a: ~(a > 0), f"{name} must be > 0 (got a value <= 0 or nan).")


def in_open_interval(x, lo: float, hi: float, name: str):
    return _check(x, lambda a: ~((a > lo) & (a < hi)),
                  f"{name} must lie in the open interval ({lo}, {hi}).")


def in_half_open_interval(x, lo: float, hi: float, name: str):
    return _check(x, lambda a: ~((a > lo) & (a <= hi)),
                  f"{name} must lie in ({lo}, {hi}].")


def data(X, y):
    """Validate a regression/classification data set: ``X`` (n, d) and ``y`` (n,), finite."""
    X = jnp.asarray(X) if not is_traced(X) else X
    y = jnp.asarray(y) if not is_traced(y) else y
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-d array of shape (n, d); got shape {tuple(X.shape)}.")
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-d array of shape (n,); got shape {tuple(y.shape)}.")
    if X.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and y disagree on the number of examples: X has {X.shape[0]} rows, y has "
            f"{y.shape[0]} entries."
        )
    if X.shape[0] == 0:
        raise ValueError("the data set is empty (n = 0).")
    return finite(X, "X"), finite(y, "y")


def width(k, name: str = "width") -> int:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {k!r}.")
    return int(k)
