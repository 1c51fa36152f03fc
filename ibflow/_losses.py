"""Losses on a batch of outputs. Every loss is a mean over examples ([THEORY §1][theory-1]); a
constant factor only rescales time, never the limit point."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


class AbstractLoss(eqx.Module):
    @abc.abstractmethod
    def __call__(
        self, outputs: Float[Array, " n"], targets: Float[Array, " n"]
    ) -> Float[Array, ""]:
        """The loss of ``outputs`` against ``targets``."""


class AbstractSquareLoss(AbstractLoss):
    """A capability: the loss is exactly ``(1/2n) Σ (fᵢ − yᵢ)²``, so its gradient in the outputs
    is the residual ``(f − y)/n``. Reductions that integrate the residual in closed form (the
    diagonal net's n-dim ODE, [THEORY §2.3][theory-2-3]) ask for it."""


class SquareLoss(AbstractSquareLoss):
    """``L = (1/2n) Σ (fᵢ − yᵢ)²`` ([THEORY §1][theory-1]), so ``∇_w L = (1/n) Xᵀ(Xw − y)`` for
    linear models."""

    def __call__(self, outputs, targets):
        return 0.5 * jnp.mean((outputs - targets) ** 2)


class LogisticLoss(AbstractLoss):
    """``L = (1/n) Σ log(1 + exp(−yᵢ fᵢ))`` for labels ``yᵢ ∈ {−1, +1}`` ([THEORY §4][theory-4])."""

    def __call__(self, outputs, targets):
        return jnp.mean(jax.nn.softplus(-targets * outputs))


class ExponentialLoss(AbstractLoss):
    """``L = (1/n) Σ exp(−yᵢ fᵢ)`` for labels ``yᵢ ∈ {−1, +1}`` ([THEORY §4][theory-4])."""

    def __call__(self, outputs, targets):
        return jnp.mean(jnp.exp(-targets * outputs))
