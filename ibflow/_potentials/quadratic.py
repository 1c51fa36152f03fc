"""Quadratic potential ``φ(x) = c x²``: the mirror flow is gradient flow with step ``1/(2c)``."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _checks
from .base import AbstractPotential


class QuadraticPotential(AbstractPotential):
    """``φ(x) = c x²`` with ``c > 0``; ``φ'' = 2c``.

    ``c = 1`` is the seed's φ₁ = x² ([THEORY §3.0][theory-3-0], Fig. 1); ``c = 1/2`` makes
    ``MirrorFlow`` equal to ``GradientFlow`` exactly.
    """

    coefficient: Float[Array, ""] = eqx.field(converter=lambda c: jnp.asarray(c, dtype=float),
                                              default=1.0)

    def __check_init__(self):
        if not _checks.is_traced(self.coefficient):
            _checks.positive(self.coefficient, "QuadraticPotential coefficient")

    def __call__(self, x):
        return self.coefficient * jnp.asarray(x, dtype=float) ** 2

    def derivative(self, x):
        return 2 * self.coefficient * jnp.asarray(x, dtype=float)

    def second_derivative(self, x):
        return jnp.broadcast_to(2 * self.coefficient, jnp.shape(x))

    def inverse_derivative(self, z):
        return jnp.asarray(z, dtype=float) / (2 * self.coefficient)
