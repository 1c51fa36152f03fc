"""Implicit regularizer of a single leaky-ReLU neuron with its affine interpolation set:
Theorem 4 ([THEORY §2.5][theory-2-5] [AZ-T4][theory-az-t4])."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .single_neuron import AbstractNeuronRegularizer


class LeakyNeuronRegularizer(AbstractNeuronRegularizer):
    r"""Theorem 4 ([THEORY AZ-T4][theory-az-t4]) for ``f(x) = a·σ_γ(⟨w, x⟩)``,
    ``σ_γ(z) = max(z, γz)``: the same ``Q`` as `SingleNeuronRegularizer` (same invariant δ, same
    warp ``|a|``), minimised
    over the **affine** set ``⟨w̃, xᵢ⟩ = s·σ_γ⁻¹(s·yᵢ)`` where ``s = sign(a(∞))``
    (``σ_γ⁻¹(v) = v`` for ``v ≥ 0``, ``v/γ`` for ``v < 0``). So `interpolation_targets` maps the
    targets through ``σ_γ⁻¹`` according to the final sign of ``a``.

    Exact for γ ∈ (0, 1] when ``a`` ends with sign `sign` (the flip rule of
    [THEORY §2.4][theory-2-4] carries over: ``w(∞) − w(0) ∈ span{xᵢ}`` since
    ``ẇ = −a Σᵢ rᵢσ'(⟨w, xᵢ⟩)xᵢ/n``). Not for ReLU (γ = 0), where the set is not affine
    ([THEORY §2.5][theory-2-5]).

    **Sliding modes ([THEORY §2.5][theory-2-5]/[§7][theory-7] "GD†" cases; found here, with
    evidence).** Where an adaptive solver "stalls at a kink", the flow is in a Filippov sliding
    mode: a pre-activation ``zᵢ = ⟨w̃, xᵢ⟩`` is pinned at 0 because the one-sided velocities of
    ``zᵢ`` point towards 0 from both sides. Writing the velocity of ``zᵢ`` as ``c − mᵢ ℓᵢ'(zᵢ)``
    (``c`` from the other examples, ``mᵢ = xᵢᵀMxᵢ > 0``), the one-sided slopes of ``ℓᵢ`` at 0 are
    ``−s·yᵢ·{γ, 1}`` (left/right for s = +1, reversed for s = −1), so an attracting slide needs
    ``s·yᵢ < 0`` (a convex kink); targets with ``s·yᵢ > 0`` never slide. Slides are common with
    generic realizable targets and a small initialization; an integrator that steps across the
    kink runs out of steps there with a pre-activation at roundoff. The theorem itself
    survives sliding: a Filippov velocity uses ``σ'ᵢ ∈ [γ, 1]`` and still keeps
    ``w(t) − w(0) ∈ span{xᵢ}``, consistent with the GD† runs of [§7][theory-7] converging to
    ``argmin Q`` at rate O(step). Restarting at activation-pattern events alone cannot help (a
    slide is a Zeno sequence of crossings); `ibflow.integrate` therefore integrates the Filippov
    (equivalent-control) field while a pre-activation slides (`ibflow._kinks`,
    [THEORY §8.2][theory-8-2]) and reaches ``argmin Q`` there too.

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

    def interpolation_targets(self, y):
        """``b = s·σ_γ⁻¹(s·y)``: the linear outputs ``⟨w̃, xᵢ⟩`` that produce outputs ``y``."""
        v = self.sign * y
        return self.sign * jnp.where(v >= 0, v, v / self.slope)
