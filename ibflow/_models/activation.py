"""Piecewise-linear activations shared by the models (one definition of each)."""

import jax.numpy as jnp


def leaky_relu(z, slope):
    """``σ(z) = max(z, γz)`` for γ ∈ [0, 1] (γ = 0: ReLU)."""
    return jnp.where(z >= 0, z, slope * z)
