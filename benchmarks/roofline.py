"""Comparison 6: roofline — the grid's useful floating-point work against this machine's
measured float64 matrix-multiply rate.

Useful work = Σ over members of (accepted steps × 6 vector-field evaluations per Tsit5 step ×
flops of one evaluation of the reduced vector field, counted from the shapes; see
``ibflow_grid.vector_field_flops``). Lockstep padding, rejected steps, the implicit tail's
Jacobians and Newton iterations are *not* useful work. The rate is divided by the rate of a
jnp float64 matmul of the grid's own shape, ``(B, n) @ (n, d)`` (the batched ``Xᵀν``), and,
for context, of a large square matmul.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._common import time_jax


@jax.jit
def _matmul(a, b):
    return a @ b


@jax.jit
def _chained(a, b):
    # 50 dependent pairs a ← (a·b)·bᵀ — the two products of the batched vector field,
    # (B, n)@(n, d) then (B, d)@(d, n) — in one compiled loop.
    def body(_, a):
        return ((a @ b) @ b.T) * 1e-3

    return jax.lax.fori_loop(0, 50, body, a)


def matmul_rate(m: int, k: int, n: int, *, runs: int = 10,
                chained: bool = False) -> tuple[float, float]:
    """Measured float64 FLOP/s of ``(m, k) @ (k, n)`` and the median time of one product.
    ``chained`` times 50 pairs of products ``(a·b)·bᵀ`` inside one compiled loop (removing the
    per-call dispatch overhead that dominates small products); the time is per product."""
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (m, k), dtype=jnp.float64)
    if chained:
        b = jax.random.normal(key_b, (k, n), dtype=jnp.float64) / n
        t = time_jax(lambda: _chained(a, b), runs=runs)
        return 2.0 * m * k * n * 100 / t.run_s, t.run_s / 100
    b = jax.random.normal(key_b, (k, n), dtype=jnp.float64)
    t = time_jax(lambda: _matmul(a, b), runs=runs)
    return 2.0 * m * k * n / t.run_s, t.run_s
