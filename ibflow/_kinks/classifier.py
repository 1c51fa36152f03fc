"""A two-layer classifier's flow in span coordinates through its kinks (THEORY §4.1, §8.2)."""

import equinox as eqx
from jaxtyping import Array, Float

from .._dynamics.classifier import ClassifierReducedDynamics
from .kinked import AbstractKinkedDynamics


class ClassifierKinkedDynamics(AbstractKinkedDynamics, ClassifierReducedDynamics):
    """`ClassifierReducedDynamics` with event-located activation switches and Filippov sliding
    (`AbstractKinkedDynamics`): the span reduction is exact for any slopes ``σ'(0) ∈ [lo, hi]``
    (the gradient still lies in the data's span), and the pre-activations ``P = W(0)Xᵀ + C G
    (+ b)`` are linear in the state, so each (example, neuron) pair's event and multiplier cost
    O(n) instead of O(d). On nearly orthogonal data a ReLU pair with ``aⱼyᵢ < 0`` that reaches
    its kink typically slides: from the dead side only the small overlaps ``⟨xₖ, xᵢ⟩`` move it.

    **Fields:** those of `ClassifierReducedDynamics`, and `max_sliding_rows` (static: at most
    this many examples may have a sliding pair at once; more is reported as degenerate
    sliding)."""

    max_sliding_rows: int = eqx.field(static=True)

    def __init__(self, initial, X, y, flow, loss_fn, *, max_sliding_rows):
        ClassifierReducedDynamics.__init__(self, initial, X, y, flow, loss_fn)
        self.max_sliding_rows = max_sliding_rows

    def preactivations(self, state) -> Float[Array, "n m"]:
        c, _, b = self._trained(state)
        return self._pre(c, b).T
