"""Parameter-space flow of a piecewise-linear model with event-located activation switches and
Filippov sliding ([THEORY §8.2][theory-8-2]); the switching itself is `AbstractKinkedDynamics`'s."""

import equinox as eqx
import jax
from jaxtyping import Array, Float

from .._dynamics.parameters import ParameterDynamics
from .kinked import AbstractKinkedDynamics


def _output_with_slopes(model, inputs):
    """The model's own output ``f(x)``, with the parameter derivative of ``σ(z) → slope·z``.

    The value does not depend on the slopes, even off the kink (``z ≠ 0`` to root-finder
    accuracy), so the residuals do not either and the equivalent-control system is exactly
    affine in the slopes; the slope-dependent term is its own parameter derivative only."""
    x, slopes = inputs
    frozen = jax.tree_util.tree_map(
        lambda a: jax.lax.stop_gradient(a) if eqx.is_inexact_array(a) else a, model)
    return frozen(x) + model.output_with_slopes(x, slopes) - frozen.output_with_slopes(x, slopes)


class PiecewiseLinearDynamics(AbstractKinkedDynamics, ParameterDynamics):
    """``dθ/dc = flow.velocity(θ, θ₀, ∇_θ L(θ; σ'), L)`` with the slopes ``σ'`` of every
    (example, neuron) pair fixed by the mode (`AbstractKinkedDynamics`).

    The parameter-space dynamics (`ParameterDynamics`: same state, real time of warped flows,
    Gauss–Newton tail Jacobian) with the parameter derivative taken at the mode's slopes
    (`_output_with_slopes`), so the adaptive solver never sees a kink and the implicit tail
    keeps its O(n·p) low-rank Jacobian.

    **Fields:** those of `ParameterDynamics` (``initial`` an `AbstractPiecewiseLinearModel`),
    and `max_sliding_rows` (static: at most this many examples may slide at once on one
    neuron; more is reported as degenerate sliding).
    """

    max_sliding_rows: int = eqx.field(static=True)

    def per_example(self, model, args):
        # ``args``: the slopes (n, m) of every pair (`slopes`), or None for the model's own.
        if args is None:
            return super().per_example(model, args)
        return _output_with_slopes, (self.X, args)

    def preactivations(self, state) -> Float[Array, "n m"]:
        return jax.vmap(self.model(state).preactivations)(self.X)
