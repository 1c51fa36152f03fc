"""``φ(x) = |x|³ + x²`` ([THEORY §3.0][theory-3-0], φ₂ of Fig. 1)."""

import jax.numpy as jnp

from .base import AbstractPotential


class CubicPotential(AbstractPotential):
    """``φ(x) = |x|³ + x²``: ``φ' = 3x|x| + 2x``, ``φ'' = 6|x| + 2`` (C², not C³ at 0)."""

    def __call__(self, x):
        x = jnp.asarray(x, dtype=float)
        return jnp.abs(x) ** 3 + x**2

    def derivative(self, x):
        x = jnp.asarray(x, dtype=float)
        return 3 * x * jnp.abs(x) + 2 * x

    def second_derivative(self, x):
        return 6 * jnp.abs(jnp.asarray(x, dtype=float)) + 2

    def inverse_derivative(self, z):
        # 3u² + 2u = |z| for u = |x| ≥ 0, without cancellation: u = 2|z| / (2 + √(4+12|z|)).
        z = jnp.asarray(z, dtype=float)
        u = 2 * jnp.abs(z) / (2 + jnp.sqrt(4 + 12 * jnp.abs(z)))
        return jnp.sign(z) * u
