"""The scaled-potential family of [THEORY §3.0][theory-3-0]: ``φ(x) = (ψ(x) + ω x²) / (1 + ω)``."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _checks
from .base import AbstractPotential, newton_inverse


class MixturePotential(AbstractPotential):
    """``φ(x) = (ψ(x) + ω x²)/(1 + ω)`` with ψ convex (any `AbstractPotential`) and ``ω > 0``.

    Liang–Montúfar's scaled-potential theorem needs ω large enough ([THEORY §3.0][theory-3-0]);
    ``ω`` is an array leaf, so sweeping it does not recompile.
    """

    psi: AbstractPotential
    omega: Float[Array, ""] = eqx.field(converter=lambda w: jnp.asarray(w, dtype=float))

    def __check_init__(self):
        if not isinstance(self.psi, AbstractPotential):
            raise ValueError("MixturePotential(psi, omega): psi must be an ibflow potential.")
        if not _checks.is_traced(self.omega):
            _checks.positive(self.omega, "MixturePotential omega")

    def __call__(self, x):
        x = jnp.asarray(x, dtype=float)
        return (self.psi(x) + self.omega * x**2) / (1 + self.omega)

    def derivative(self, x):
        x = jnp.asarray(x, dtype=float)
        return (self.psi.derivative(x) + 2 * self.omega * x) / (1 + self.omega)

    def second_derivative(self, x):
        return (self.psi.second_derivative(x) + 2 * self.omega) / (1 + self.omega)

    def inverse_derivative(self, z):
        return newton_inverse(self, z)
