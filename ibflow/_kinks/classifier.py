"""A two-layer classifier's flow in span coordinates through its kinks (THEORY §4.1, §8.2)."""

import equinox as eqx
import jax
from jaxtyping import Array, Float

from .._dynamics.classifier import ClassifierReducedDynamics
from .._models.activation import leaky_relu
from .kinked import AbstractKinkedDynamics


class ClassifierKinkedDynamics(AbstractKinkedDynamics, ClassifierReducedDynamics):
    """`ClassifierReducedDynamics` with event-located activation switches and Filippov sliding
    (`AbstractKinkedDynamics`): the span reduction is exact for any slopes ``σ'(0) ∈ [lo, hi]``
    (the gradient still lies in the data's span), and the pre-activations ``P = W(0)Xᵀ + C G
    (+ b)`` are linear in the state, so each (example, neuron) pair's event and multiplier cost
    O(n) instead of O(d). On nearly orthogonal data a ReLU pair with ``aⱼyᵢ < 0`` that reaches
    its kink typically slides: from the dead side only the small overlaps ``⟨xₖ, xᵢ⟩`` move it.

    **Fields:** those of `ClassifierReducedDynamics`, and `max_sliding_rows` (static: at most
    this many examples may slide at once on one neuron; more is reported as degenerate
    sliding)."""

    max_sliding_rows: int = eqx.field(static=True)

    def __init__(self, initial, X, y, flow, loss_fn, *, max_sliding_rows):
        ClassifierReducedDynamics.__init__(self, initial, X, y, flow, loss_fn)
        self.max_sliding_rows = max_sliding_rows

    def preactivations(self, state) -> Float[Array, "n m"]:
        c, _, b = self._trained(state)
        return self._pre(c, b).T

    def slope_response(self, state, base, index, mask):
        """Closed form of `AbstractKinkedDynamics.slope_response`: on the direction,
        ``Ċ = −D`` (``ḃ = −D1``) with ``Dⱼₗ = aⱼ λₗⱼ rₗ`` and ``r = ∂ℓ/∂f`` at the outputs (which
        do not depend on the slopes, as ``σ(0) = 0``), so ``żᵢⱼ = −aⱼ Σₗ λₗⱼ rₗ (Gₗᵢ + β)``, with
        ``β = 1`` for a trained bias. Neuron j's matrix is ``−aⱼ (G + β)[Iⱼ, Iⱼ] diag(r[Iⱼ])``
        over its examples ``Iⱼ = index[j]``: O(m K²) numbers instead of K + 1 evaluations of the
        field (measured on digits, n = 50, m = 100, K = 32: a field evaluation with 5 sliding
        pairs took 2.2 ms through `linear_response`)."""
        c, a, b = self._trained(state)
        outputs = a @ leaky_relu(self._pre(c, b), jax.lax.stop_gradient(self.initial.slope))
        r = jax.grad(lambda f: self.loss_fn(f, self.y))(outputs)  # (n,)
        gram = self.gram if b is None else self.gram + 1.0
        zdot0 = -(gram @ (base * r[:, None])) * a[None, :]  # (n, m)
        block = gram[index[:, :, None], index[:, None, :]] * r[index][:, None, :]  # (m, K, K)
        return zdot0, -a[:, None, None] * block
