"""``φ(x) = cosh x`` ([THEORY §3.0][theory-3-0], an example unscaled potential)."""

import jax.numpy as jnp

from .base import AbstractPotential


class CoshPotential(AbstractPotential):
    """``φ(x) = cosh x``: ``φ' = sinh x``, ``φ'' = cosh x``, ``(φ')⁻¹ = asinh``."""

    def __call__(self, x):
        return jnp.cosh(jnp.asarray(x, dtype=float))

    def derivative(self, x):
        return jnp.sinh(jnp.asarray(x, dtype=float))

    def second_derivative(self, x):
        return jnp.cosh(jnp.asarray(x, dtype=float))

    def inverse_derivative(self, z):
        return jnp.arcsinh(jnp.asarray(z, dtype=float))
