"""Even polynomial potentials ``φ(x) = c₂x² + c₃|x|³ + c₄x⁴`` (φ₁, φ₂, φ₃ of
[THEORY §3.0][theory-3-0])."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _checks
from .base import AbstractPotential, newton_inverse


def _as_float(c):
    return jnp.asarray(c, dtype=float)


class PolynomialPotential(AbstractPotential):
    """``φ(x) = c₂ x² + c₃ |x|³ + c₄ x⁴`` with ``c₂ > 0``, ``c₃, c₄ ≥ 0``.

    ``(1, 0, 0)``, ``(1, 1, 0)``, ``(1, 0, 1)`` are the seed's φ₁, φ₂, φ₃ (same values as
    `QuadraticPotential`, `CubicPotential`, `QuarticPotential`). The coefficients are array
    leaves, so the three potentials can be stacked and vmapped through one compiled
    `integrate` (what the Liang–Montúfar reproductions do).
    """

    quadratic: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    cubic: Float[Array, ""] = eqx.field(converter=_as_float, default=0.0)
    quartic: Float[Array, ""] = eqx.field(converter=_as_float, default=0.0)

    def __check_init__(self):
        if not _checks.is_traced(self.quadratic):
            _checks.positive(self.quadratic, "PolynomialPotential quadratic coefficient")
        for name, c in (("cubic", self.cubic), ("quartic", self.quartic)):
            if not _checks.is_traced(c) and bool(jnp.any(c < 0)):
                raise ValueError(f"PolynomialPotential: the {name} coefficient must be >= 0.")

    def __call__(self, x):
        x = jnp.asarray(x, dtype=float)
        return self.quadratic * x**2 + self.cubic * jnp.abs(x) ** 3 + self.quartic * x**4

    def derivative(self, x):
        x = jnp.asarray(x, dtype=float)
        return 2 * self.quadratic * x + 3 * self.cubic * x * jnp.abs(x) + 4 * self.quartic * x**3

    def second_derivative(self, x):
        x = jnp.asarray(x, dtype=float)
        return 2 * self.quadratic + 6 * self.cubic * jnp.abs(x) + 12 * self.quartic * x**2

    def inverse_derivative(self, z):
        return newton_inverse(self, z)
