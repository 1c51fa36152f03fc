"""The log-loss clock: a flow run at the speed that makes ``−log L`` its clock
([THEORY §2.2][theory-2-2], [§4][theory-4])."""

import jax
import jax.numpy as jnp

from .base import AbstractFlow, AbstractLossClockFlow


class LossClock(AbstractLossClockFlow):
    """`flow` time-warped so that its clock is ``c = log L(0) − log L``: ``d(−log L)/dc = 1``.

    Along ``dθ/dc = −k P ∇L`` the loss obeys ``dL/dc = −k ⟨∇L, P∇L⟩``, so the clock factor is
    ``k = L / ⟨∇L, P∇L⟩`` (for gradient flow ``L/‖∇L‖²``, i.e. ``dθ/dc = −∇log L / ‖∇log L‖²``).
    Same path and limit as `flow`, another clock ([THEORY §2.2][theory-2-2]
    [AZ-WARP][theory-az-warp]): where the loss decays like ``1/t`` (separable classification, ‖θ‖ →
    ∞) the velocity stays O(1) and reaching a loss of 1e-30 costs a number of steps proportional to
    ``log(1/1e-30)``, not to ``1e30``. The engine
    integrates the real time ``t = ∫ k dc`` alongside.
    """

    flow: AbstractFlow

    time_warped = True

    def __check_init__(self):
        if not isinstance(self.flow, AbstractFlow):
            raise ValueError(f"LossClock(flow): flow must be an ibflow flow; got "
                             f"{type(self.flow).__name__}.")

    def preconditioner(self, model, initial):
        return self.flow.preconditioner(model, initial)

    def speed(self, model, initial, grad, loss):
        pre = self.preconditioner(model, initial)
        if pre is None:
            pre = jax.tree_util.tree_map(jnp.ones_like, grad)
        sq = sum(jnp.sum(p * g**2) for p, g in zip(jax.tree_util.tree_leaves(pre),
                                                    jax.tree_util.tree_leaves(grad)))
        return loss / sq

    def clock_at_loss(self, initial_loss, loss):
        """``c = log L(0) − log L``."""
        return jnp.log(initial_loss / loss)
