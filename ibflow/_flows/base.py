"""Abstract flow: the geometry that turns a loss gradient into a velocity."""

import abc

import equinox as eqx
import jax
from jaxtyping import Array, Float, PyTree


class AbstractFlow(eqx.Module):
    """A flow moves the trainable (inexact-array) leaves θ of a model by

        ``dθ/dc = −speed(θ, ∇L, L) · P(θ) ⊙ ∇L(θ)``,

    with a diagonal, positive *preconditioner* ``P`` (1 for gradient flow, ``η/φ''(θ−θ₀)`` for a
    mirror flow with a separable potential) and a positive scalar *speed* (1 for flows in real
    time; a time warp otherwise, [THEORY §2.2][theory-2-2]). The engine uses this structure: the
    stiff tail's Jacobian is ``−speed·P·(1/n)JᵀJ`` to leading order ([THEORY §8.1][theory-8-1]), and
    with ``time_warped = True`` the real time ``t = ∫ speed dc`` is integrated alongside the clock
    c.
    """

    #: Whether `speed` can differ from 1 (then the engine records the real time separately).
    time_warped: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def preconditioner(self, model: eqx.Module, initial: eqx.Module) -> PyTree[Array] | None:
        """``P`` on the trainable leaves (same structure as ``eqx.filter(model,
        eqx.is_inexact_array)``), or None for the identity."""

    @abc.abstractmethod
    def speed(self, model: eqx.Module, initial: eqx.Module, grad: PyTree[Array],
              loss: Float[Array, ""]) -> Float[Array, ""]:
        """The scalar clock factor (> 0); 1 for a flow in real time."""

    def velocity(self, model: eqx.Module, initial: eqx.Module, grad: PyTree[Array],
                 loss: Float[Array, ""]) -> PyTree[Array]:
        """``dθ/dc`` at ``model`` (started from ``initial``), given ``∇L`` and ``L``."""
        scale = self.speed(model, initial, grad, loss)
        pre = self.preconditioner(model, initial)
        if pre is None:
            return jax.tree_util.tree_map(lambda g: -scale * g, grad)
        return jax.tree_util.tree_map(lambda g, p: -scale * p * g, grad, pre)


class AbstractLossClockFlow(AbstractFlow):
    """A capability: the flow's clock is a known function of the loss, so the clock value at
    which a target loss is reached is known before the solve (callers size the solve's end by
    it). Example: `LossClock`, whose clock is ``log L(0) − log L``."""

    @abc.abstractmethod
    def clock_at_loss(self, initial_loss: Float[Array, ""], loss: Float[Array, ""]
                      ) -> Float[Array, ""]:
        """The clock value at which the loss, started at `initial_loss`, equals `loss`."""
