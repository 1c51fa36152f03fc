"""The ℓ1 norm, the rich-regime limit of the diagonal network (THEORY §2.3 "Limits")."""

import jax.numpy as jnp

from .base import AbstractRegularizer


class L1Norm(AbstractRegularizer):
    """``Q(w) = ‖w‖₁``. Not strictly convex, so it has no gradient inverse: `minimize_regularizer`
    solves it as a linear program (``ibflow.min_l1_interpolant``, host only)."""

    def value(self, w):
        return jnp.sum(jnp.abs(w))

    def grad(self, w):
        """A subgradient: ``sign(w)`` (0 at 0)."""
        return jnp.sign(w)

    def interpolation_targets(self, y):
        return y
