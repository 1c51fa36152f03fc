"""ReLU, leaky ReLU, |·| and the identity: the piecewise-linear activations."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .base import AbstractPiecewiseLinearActivation


def leaky_relu(z, slope):
    """``σ(z) = max(z, γz)`` for γ ∈ [0, 1] (γ = 0: ReLU): the one definition the models and
    their reductions share."""
    return jnp.where(z >= 0, z, slope * z)


class LeakyReLU(AbstractPiecewiseLinearActivation):
    """``σ(z) = max(z, γz)``, γ ∈ [0, 1] a fixed (untrained, sweepable) array leaf."""

    kinked = True

    slope: Float[Array, ""]

    def __init__(self, slope: Float[ArrayLike, ""] = 0.2):
        slope = jnp.asarray(slope, dtype=float)
        if slope.ndim != 0:
            raise ValueError("LeakyReLU(slope): slope must be a scalar.")
        if not _checks.is_traced(slope):
            _checks.finite(slope, "slope")
            if not 0.0 <= float(slope) <= 1.0:
                raise ValueError(f"LeakyReLU(slope): slope must lie in [0, 1]; got {float(slope)}.")
        self.slope = slope

    def slopes(self):
        return jax.lax.stop_gradient(self.slope), jnp.ones((), dtype=self.slope.dtype)


class ReLU(AbstractPiecewiseLinearActivation):
    """``σ(z) = max(z, 0)``."""

    kinked = True

    def slopes(self):
        return jnp.zeros(()), jnp.ones(())


class Absolute(AbstractPiecewiseLinearActivation):
    """``σ(z) = |z|`` (Liang–Montúfar's absolute-value networks, [THEORY §3][theory-3])."""

    kinked = True

    def slopes(self):
        return -jnp.ones(()), jnp.ones(())


class Identity(AbstractPiecewiseLinearActivation):
    """``σ(z) = z``: a fully connected linear network ([THEORY §2.4][theory-2-4],
    [§2.6][theory-2-6])."""

    kinked = False

    def slopes(self):
        return jnp.ones(()), jnp.ones(())
