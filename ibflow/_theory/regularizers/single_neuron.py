"""Implicit regularizer of the two-layer network with one hidden neuron: Theorem 2 with the
sign-flip rule, Proposition 1 (δ = 0) ([THEORY §2.4][theory-2-4] [AZ-FC-Q][theory-az-fc-q],
[AZ-P1][theory-az-p1])."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._stable import safe_norm
from .base import AbstractLegendreRegularizer


def _layer_squares(rho, delta):
    """``(a², ‖w‖²) = (S + δ/2, S − δ/2)`` with ``S = sqrt(ρ² + δ²/4)``, the smaller one formed as
    ``ρ²/(larger)`` so that neither cancels when ``|δ| ≫ ρ`` ([THEORY §2.4][theory-2-4],
    invariant)."""
    big = jnp.hypot(rho, delta / 2.0) + jnp.abs(delta) / 2.0
    pos = big > 0
    small = jnp.where(pos, rho**2 / jnp.where(pos, big, 1.0), 0.0)
    a_sq = jnp.where(delta >= 0, big, small)
    w_sq = jnp.where(delta >= 0, small, big)
    return a_sq, w_sq


def neuron_value(delta, anchor, w):
    """``q_δ(‖w̃‖) − (3/2)⟨anchor, w̃⟩`` with ``q_δ(ρ) = (S − δ)·sqrt(S + δ/2)``
    ([THEORY AZ-FC-Q][theory-az-fc-q]; ``S − δ = ‖w‖² − δ/2``)."""
    a_sq, w_sq = _layer_squares(safe_norm(w), delta)
    return (w_sq - delta / 2.0) * jnp.sqrt(a_sq) - 1.5 * jnp.dot(anchor, w)


def neuron_grad(delta, anchor, w):
    """``(3/2)(sign(a)·w − anchor)``: ``∇q_δ(‖w̃‖) = (3/2)·‖w‖·w̃/‖w̃‖`` and ``sign(a)w`` is
    ``‖w‖`` times the direction of ``w̃`` (0 at the conic point ``w̃ = 0``)."""
    rho = safe_norm(w)
    _, w_sq = _layer_squares(rho, delta)
    direction = w / jnp.where(rho > 0, rho, 1.0)
    return 1.5 * (jnp.sqrt(w_sq) * direction - anchor)


def neuron_grad_inverse(delta, anchor, z):
    """``w̃ = sqrt((‖u‖² + δ)₊)·u`` with ``u = (2/3)z + anchor`` = sign(a)·w, since
    ``|a| = sqrt(‖w‖² + δ)`` ([THEORY AZ-FC-Q][theory-az-fc-q] explicit inverse). For δ < 0 the ball
    ``‖u‖ ≤ sqrt(−δ)`` is the subdifferential at the conic point and maps to 0."""
    u = (2.0 / 3.0) * z + anchor
    shifted = _shifted_square(delta, u)
    positive = shifted > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, shifted, 1.0)), 0.0) * u


def neuron_conjugate(delta, anchor, z):
    """``Q*(z) = ½ (‖u‖² + δ)₊^{3/2}``, ``u = (2/3)z + anchor`` (``∇Q* = sqrt(·)u`` above; the
    constant is fixed by ``Q*(∇Q(w̃)) = ⟨∇Q(w̃), w̃⟩ − Q(w̃)``, checked in the tests)."""
    u = (2.0 / 3.0) * z + anchor
    return 0.5 * _shifted_square(delta, u) ** 1.5


def _shifted_square(delta, u):
    """``(‖u‖² + δ)₊``; for δ < 0 as ``(‖u‖ − r)₊(‖u‖ + r)``, ``r = sqrt(−δ)``, to avoid
    cancellation near the ball's boundary."""
    sq = jnp.sum(u**2)
    neg = delta < 0
    # Double where: sqrt's derivative at 0 is inf, and inf·0 would make ∂/∂δ NaN for δ ≥ 0.
    r = jnp.where(neg, jnp.sqrt(jnp.where(neg, -delta, 1.0)), 0.0)
    norm = safe_norm(u)
    return jnp.where(delta >= 0, sq + delta, jnp.maximum(norm - r, 0.0) * (norm + r))


def _anchor(w0, final_sign):
    return jnp.asarray(final_sign, dtype=float) * jnp.asarray(w0, dtype=float)


class AbstractNeuronRegularizer(AbstractLegendreRegularizer):
    """The Theorem-2 regularizer ``Q(w̃) = q_δ(‖w̃‖) − (3/2)⟨anchor, w̃⟩``
    ([THEORY AZ-FC-Q][theory-az-fc-q]), shared by the linear neuron and the leaky neuron (Theorem 4
    has the same Q; only the interpolation set differs, see `interpolation_targets`)."""

    delta: eqx.AbstractVar[Float[Array, ""]]
    anchor: eqx.AbstractVar[Float[Array, " d"]]

    def value(self, w):
        return neuron_value(self.delta, self.anchor, w)

    def grad(self, w):
        return neuron_grad(self.delta, self.anchor, w)

    def grad_inverse(self, z):
        return neuron_grad_inverse(self.delta, self.anchor, z)

    def conjugate(self, z):
        return neuron_conjugate(self.delta, self.anchor, z)


class SingleNeuronRegularizer(AbstractNeuronRegularizer):
    r"""Theorem 2 ([THEORY AZ-FC-Q][theory-az-fc-q]) for ``f(x) = a⟨w, x⟩`` with ``δ = a² − ‖w‖²``:

    ``Q(w̃) = q_δ(‖w̃‖) − (3/2)⟨σ·w₀, w̃⟩``, ``q_δ(ρ) = (S − δ)sqrt(S + δ/2)``,
    ``S = sqrt(ρ² + δ²/4)``, where ``σ = sign(a(∞))`` is the **final** sign of the second layer.

    Invariant form: gradient flow gives ``w(∞) − w(0) = −∫ a ∇L dt ∈ range Xᵀ`` whatever ``a``
    does, and ``∇Q(w̃)·(2/3) = sign(a)·w − σw₀``; so the anchor is ``σ·w₀``. When ``a`` keeps its
    sign (always if δ > 0, since ``a² ≥ δ``; also for δ = 0, where reaching ``a = 0`` means
    reaching the saddle θ = 0) ``σ = sign(a₀)``, which is the ``Q`` of [§2.4][theory-2-4]; when
    ``a`` flips (possible only for δ < 0) ``σ = −sign(a₀)``, which is its ``Q_flip`` (linear term of
    the opposite sign). δ = 0 is Proposition 1 (``Q = ‖w̃‖^{3/2} − (3/2)‖w̃₀‖^{1/2}⟨ŵ₀, w̃⟩``,
    [THEORY AZ-P1][theory-az-p1]). For δ < 0, ``Q`` has a conic point at 0
    (``q'(0⁺) = (3/2)sqrt(−δ)``); the dual used by `minimize_regularizer` is smooth there.

    **Fields:** `delta` ``δ`` (scalar), `anchor` (d,) ``σ·w₀``.
    """

    delta: Float[Array, ""]
    anchor: Float[Array, " d"]

    def __check_init__(self):
        if jnp.ndim(self.delta) != 0 or jnp.ndim(self.anchor) != 1:
            raise ValueError("SingleNeuronRegularizer needs a scalar delta and an anchor of "
                             "shape (d,).")

    @classmethod
    def from_layers(cls, a0: Float[ArrayLike, ""], w0: Float[ArrayLike, " d"], *,
                    final_sign: Float[ArrayLike, ""]) -> "SingleNeuronRegularizer":
        """From the initial layers ``a₀`` (scalar), ``w₀`` (d,) and the final sign ``σ = ±1``
        of ``a`` (``sign(a₀)`` unless ``a`` changed sign)."""
        a0, w0 = jnp.asarray(a0, dtype=float), jnp.asarray(w0, dtype=float)
        return cls(delta=a0**2 - jnp.sum(w0**2), anchor=_anchor(w0, final_sign))

    @classmethod
    def balanced(cls, w_tilde0: Float[ArrayLike, " d"]) -> "SingleNeuronRegularizer":
        """Proposition 1 (δ = 0, [THEORY AZ-P1][theory-az-p1]) from the initial predictor
        ``w̃₀ ≠ 0`` alone: ``σw₀ = w̃₀/‖w̃₀‖^{1/2}``."""
        w_tilde0 = jnp.asarray(w_tilde0, dtype=float)
        return cls(delta=jnp.zeros(()), anchor=w_tilde0 / jnp.sqrt(jnp.linalg.norm(w_tilde0)))

    def interpolation_targets(self, y):
        return y
