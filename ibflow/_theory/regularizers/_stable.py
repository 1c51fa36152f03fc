"""Overflow-robust scalar kernels shared by the regularizers ([THEORY §2.3][theory-2-3] solver
tip)."""

import jax.numpy as jnp


def asinh_ratio(x, c):
    """``arcsinh(x / c)`` for ``c > 0``, finite even when ``x / c`` overflows (tiny ``c``)."""
    small = jnp.abs(x) <= c
    safe_c = jnp.where(small, c, 1.0)
    inner = jnp.arcsinh(jnp.where(small, x, 0.0) / safe_c)
    ax = jnp.abs(x)
    outer = jnp.sign(x) * (jnp.log(ax + jnp.hypot(ax, c)) - jnp.log(c))
    return jnp.where(small, inner, outer)


def scaled_sinh(log_c, u):
    """``c · sinh(u)`` with ``c = exp(log_c)``, without forming ``sinh(u)`` (no overflow while
    the product is representable)."""
    a = jnp.abs(u)
    # Direct form near 0 (the |u| form has a wrong zero derivative at u = 0 under autodiff).
    near = a < 1.0
    direct = jnp.exp(log_c) * jnp.sinh(jnp.where(near, u, 0.0))
    far = jnp.sign(u) * jnp.exp(log_c + a) * (-jnp.expm1(-2.0 * a)) / 2.0
    return jnp.where(near, direct, far)


def scaled_cosh_minus_one(log_c, u):
    """``c · (cosh(u) − 1) = 2c · sinh²(u/2)``, overflow-robust and accurate near ``u = 0``."""
    a = jnp.abs(u)
    return jnp.exp(log_c + a - jnp.log(2.0)) * jnp.expm1(-a) ** 2


def safe_norm(v):
    """``‖v‖`` with a zero (not nan) derivative at ``v = 0``."""
    sq = jnp.sum(v**2)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)
