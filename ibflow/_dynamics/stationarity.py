"""The second way a flow ends ([THEORY §8.3][theory-8-3]): its field vanishes with the loss above
the target (a spurious minimum, a saddle, a Clarke-stationary point on a kink).

The engine's smooth phases test it as a boolean stop; the segment loop of a switching flow as one
more component of its root-found event (`Stationarity.value`, negative once stationary), so the
end point is located as precisely as a switch."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

#: A flow is at rest when its unit-speed field ``F`` satisfies
#: ``‖F‖ ≤ STATIONARY_TOL · ‖F₀‖ · min(1, L/L₀)`` (F₀, L₀: at the flow's start) with the loss
#: above the phase's level. The factor ``L/L₀`` keeps interpolating flows out: there
#: ``‖∇L‖ ≳ √L`` (square loss, nondegenerate tangent kernel) or ``∝ L`` (exponential tails),
#: which falls more slowly than ``L`` itself. Relative to the start, a small initialization's
#: tiny but growing field near the saddle at 0 never triggers it.
STATIONARY_TOL = 1e-6


class Stationarity(eqx.Module):
    """The reference of the stationarity test: the field's norm and the loss at the start."""

    field0: Float[Array, ""]
    loss0: Float[Array, ""]

    def _threshold(self, loss):
        return STATIONARY_TOL * self.field0 * jnp.minimum(1.0, loss / self.loss0)

    def reached(self, field_norm, loss) -> Bool[Array, ""]:
        """Whether a field of norm `field_norm` at `loss` is at rest."""
        return jnp.isfinite(loss) & (field_norm <= self._threshold(loss))

    def value(self, field_norm, loss) -> Float[Array, ""]:
        """``log(‖F‖ / threshold)``: positive while the flow moves, crossing 0 downwards where
        it comes to rest (−1 at a non-finite loss: an immediate event, as the loss event's)."""
        ratio = field_norm / jnp.maximum(self._threshold(loss), jnp.finfo(field_norm.dtype).tiny)
        return jnp.where(jnp.isfinite(loss), jnp.log(jnp.maximum(
            ratio, jnp.finfo(field_norm.dtype).tiny)), -1.0)
