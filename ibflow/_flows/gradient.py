"""Gradient flow ``dθ/dt = −∇L(θ)`` (THEORY §1)."""

import jax

from .base import AbstractFlow


class GradientFlow(AbstractFlow):
    """Plain gradient flow. The mirror flow with ``φ(x) = x²/2`` equals it exactly."""

    def velocity(self, model, initial, grad, loss):
        return jax.tree_util.tree_map(lambda g: -g, grad)
