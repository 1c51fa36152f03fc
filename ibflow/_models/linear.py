"""Plain linear regression ``f(x) = <w, x>`` — the model whose gradient flow is a matrix
exponential, used as the solver's ground truth."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .base import AbstractInvariantModel, AbstractLinearModel


class LinearModel(AbstractLinearModel, AbstractInvariantModel):
    """``f(x) = <w, x>``. Gradient flow from ``w(0) = 0`` converges to the minimum-ℓ2
    interpolant ``X⁺y`` (its iterates stay in range Xᵀ)."""

    w: Float[Array, " d"]

    def __check_init__(self):
        if jnp.ndim(self.w) != 1:
            raise ValueError(f"LinearModel needs w of shape (d,); got {jnp.shape(self.w)}.")

    def predictor(self) -> Float[Array, " d"]:
        return self.w

    def invariants(self) -> dict:
        return {}
