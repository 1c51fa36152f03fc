"""``φ(x) = x⁴ + x²`` ([THEORY §3.0][theory-3-0], φ₃ of Fig. 1)."""

import jax.numpy as jnp

from .base import AbstractPotential


class QuarticPotential(AbstractPotential):
    """``φ(x) = x⁴ + x²``: ``φ' = 4x³ + 2x``, ``φ'' = 12x² + 2``."""

    def __call__(self, x):
        x = jnp.asarray(x, dtype=float)
        return x**4 + x**2

    def derivative(self, x):
        x = jnp.asarray(x, dtype=float)
        return 4 * x**3 + 2 * x

    def second_derivative(self, x):
        return 12 * jnp.asarray(x, dtype=float) ** 2 + 2

    def inverse_derivative(self, z):
        # Cardano for x³ + x/2 − z/4 = 0 (one real root, discriminant > 0). The form
        # x = s − 1/(6s), s = cbrt(z/8 + √(z²/64 + 1/216)), avoids the cancellation of the usual
        # two-cube-root sum for z < 0 by using oddness.
        z = jnp.asarray(z, dtype=float)
        a = jnp.abs(z)
        s = jnp.cbrt(a / 8 + jnp.sqrt(a**2 / 64 + 1.0 / 216))
        return jnp.sign(z) * (s - 1.0 / (6 * s))
