"""Quadratic reference regularizers: ℓ2 (Theorem 3's limit, [THEORY AZ-T3][theory-az-t3]) and
weighted ℓ2 (the kernel limit of the diagonal network, [THEORY §2.3][theory-2-3] "Limits")."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from ... import _checks
from .base import AbstractLegendreRegularizer


class L2Norm(AbstractLegendreRegularizer):
    """``Q(w) = ½‖w‖²``; its minimizer over ``Xw = y`` is ``X⁺y``. It is the implicit bias of
    the single-neuron network in the limit of vanishing initialization
    ([THEORY AZ-T3][theory-az-t3]) and of any model whose gradient flow stays in ``range Xᵀ`` from
    ``w(0) = 0``."""

    def value(self, w):
        return 0.5 * jnp.sum(w**2)

    def grad(self, w):
        return w

    def grad_inverse(self, z):
        return z

    def conjugate(self, z):
        return 0.5 * jnp.sum(z**2)

    def interpolation_targets(self, y):
        return y


class WeightedL2Norm(AbstractLegendreRegularizer):
    """``Q(w) = ½ Σᵢ λᵢ (wᵢ − cᵢ)²`` with weights ``λᵢ > 0`` and center ``c``.

    **Fields:** `weights` (d,) ``λ``; `center` (d,) ``c``.
    """

    weights: Float[Array, " d"]
    center: Float[Array, " d"]

    def __check_init__(self):
        if jnp.ndim(self.weights) != 1 or jnp.shape(self.center) != jnp.shape(self.weights):
            raise ValueError("WeightedL2Norm needs weights and center of one shape (d,).")
        if not _checks.is_traced(self.weights):
            _checks.positive_finite(self.weights, "WeightedL2Norm weights")
            _checks.finite(self.center, "WeightedL2Norm center")

    def value(self, w):
        return 0.5 * jnp.sum(self.weights * (w - self.center) ** 2)

    def grad(self, w):
        return self.weights * (w - self.center)

    def grad_inverse(self, z):
        return self.center + z / self.weights

    def conjugate(self, z):
        return jnp.sum(0.5 * z**2 / self.weights + z * self.center)

    def interpolation_targets(self, y):
        return y
