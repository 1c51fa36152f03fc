"""Gradient flow ``dθ/dt = −∇L(θ)`` ([THEORY §1][theory-1])."""

import jax.numpy as jnp

from .base import AbstractFlow


class GradientFlow(AbstractFlow):
    """Plain gradient flow. The mirror flow with ``φ(x) = x²/2`` equals it exactly."""

    time_warped = False

    def preconditioner(self, model, initial):
        return None

    def speed(self, model, initial, grad, loss):
        return jnp.ones((), dtype=jnp.result_type(loss))
