"""How φ is summed into the parameter-space potential Φ ([THEORY §3.1][theory-3-1]).

* ``Unscaled()``: ``Φ(θ) = Σ_j φ(Δ_j)``, ``Δ = θ − θ(0)``.
* ``WidthScaled(n)``: ``Φ(θ) = n⁻² Σ_j φ(n Δ_j)``, so ``∇Φ = n⁻¹ φ'(nΔ)`` and ``∇²Φ = φ''(nΔ)``:
  φ is probed at ``nΔ = O(1)`` while lazy training moves each parameter by ``O(1/n)``.

The width ``n`` is an array leaf (sweeping it does not recompile); it is the network width of
[THEORY §3][theory-3], not the size of θ.
"""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _checks
from .base import AbstractPotential


class AbstractScaling(eqx.Module):
    """Elementwise pieces of the separable Φ, as functions of the displacement ``Δ = θ − θ(0)``."""

    @abc.abstractmethod
    def value(self, phi: AbstractPotential, delta: Float[Array, "*s"]) -> Float[Array, ""]:
        """``Φ`` summed over the entries of ``delta``."""

    @abc.abstractmethod
    def gradient(self, phi: AbstractPotential, delta: Float[Array, "*s"]) -> Float[Array, "*s"]:
        """``∇Φ`` (the mirror map), elementwise."""

    @abc.abstractmethod
    def hessian(self, phi: AbstractPotential, delta: Float[Array, "*s"]) -> Float[Array, "*s"]:
        """The diagonal of ``∇²Φ``, elementwise."""

    @abc.abstractmethod
    def inverse_gradient(self, phi: AbstractPotential, z: Float[Array, "*s"]) -> Float[Array, "*s"]:
        """``Δ`` with ``∇Φ(Δ) = z``, elementwise."""


class Unscaled(AbstractScaling):
    """``Φ(θ) = Σ_j φ(θ_j − θ_j(0))`` ([THEORY §3.0][theory-3-0] "unscaled potential")."""

    def value(self, phi, delta):
        return jnp.sum(phi(delta))

    def gradient(self, phi, delta):
        return phi.derivative(delta)

    def hessian(self, phi, delta):
        return phi.second_derivative(delta)

    def inverse_gradient(self, phi, z):
        return phi.inverse_derivative(z)


class WidthScaled(AbstractScaling):
    """``Φ(θ) = n⁻² Σ_j φ(n(θ_j − θ_j(0)))`` ([THEORY §3.0][theory-3-0] "scaled potential"), ``n`` =
    width."""

    width: Float[Array, ""] = eqx.field(converter=lambda n: jnp.asarray(n, dtype=float))

    def __check_init__(self):
        if not _checks.is_traced(self.width):
            if jnp.ndim(self.width) != 0:
                raise ValueError("WidthScaled(width): width must be a scalar.")
            _checks.positive(self.width, "WidthScaled width")

    def value(self, phi, delta):
        return jnp.sum(phi(self.width * delta)) / self.width**2

    def gradient(self, phi, delta):
        return phi.derivative(self.width * delta) / self.width

    def hessian(self, phi, delta):
        return phi.second_derivative(self.width * delta)

    def inverse_gradient(self, phi, z):
        return phi.inverse_derivative(self.width * z) / self.width
