"""Implicit regularizer of a single leaky-ReLU neuron with its affine interpolation set:
Theorem 4 (THEORY §2.5 [AZ-T4])."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .base import AbstractLegendreRegularizer
from .single_neuron import (neuron_conjugate, neuron_grad, neuron_grad_inverse, neuron_value)


class LeakyNeuronRegularizer(AbstractLegendreRegularizer):
    r"""Theorem 4 (THEORY [AZ-T4]) for ``f(x) = a·σ_γ(⟨w, x⟩)``, ``σ_γ(z) = max(z, γz)``:
    the same ``Q`` as `SingleNeuronRegularizer` (same invariant δ, same warp ``|a|``), minimised
    over the **affine** set ``⟨w̃, xᵢ⟩ = s·σ_γ⁻¹(s·yᵢ)`` where ``s = sign(a(∞))``
    (``σ_γ⁻¹(v) = v`` for ``v ≥ 0``, ``v/γ`` for ``v < 0``). So `interpolation_targets` maps the
    targets through ``σ_γ⁻¹`` according to the final sign of ``a``.

    Exact for γ ∈ (0, 1] when ``a`` ends with sign `sign` (the flip rule of THEORY §2.4 carries
    over: ``w(∞) − w(0) ∈ span{xᵢ}`` since ``ẇ = −a Σᵢ rᵢσ'(⟨w, xᵢ⟩)xᵢ/n``). Not for ReLU
    (γ = 0), where the set is not affine (THEORY §2.5).

    **Fields:** `delta` δ, `anchor` (d,) ``s·w₀``, `slope` γ, `sign` ``s = ±1``.
    """

    delta: Float[Array, ""]
    anchor: Float[Array, " d"]
    slope: Float[Array, ""]
    sign: Float[Array, ""]

    def __check_init__(self):
        if (jnp.ndim(self.delta) != 0 or jnp.ndim(self.anchor) != 1 or jnp.ndim(self.slope) != 0
                or jnp.ndim(self.sign) != 0):
            raise ValueError("LeakyNeuronRegularizer needs scalar delta, slope, sign and an "
                             "anchor of shape (d,).")

    def value(self, w):
        return neuron_value(self.delta, self.anchor, w)

    def grad(self, w):
        return neuron_grad(self.delta, self.anchor, w)

    def grad_inverse(self, z):
        return neuron_grad_inverse(self.delta, self.anchor, z)

    def conjugate(self, z):
        return neuron_conjugate(self.delta, self.anchor, z)

    def interpolation_targets(self, y):
        """``b = s·σ_γ⁻¹(s·y)``: the linear outputs ``⟨w̃, xᵢ⟩`` that produce outputs ``y``."""
        v = self.sign * y
        return self.sign * jnp.where(v >= 0, v, v / self.slope)
