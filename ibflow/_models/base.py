"""Abstract model classes.

A model is an Equinox module whose inexact array leaves are its parameters. ``__call__`` takes a
single example; batch with ``jax.vmap(model)(X)``. Leaves that are *not* trained (a fixed second
layer, an activation slope) are still array leaves, so they can be swept without recompiling, but
the model wraps them in ``jax.lax.stop_gradient`` so every flow leaves them constant.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree


class AbstractModel(eqx.Module):
    """A scalar-output model of one example."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        """The model's output on one example ``x``."""

    @abc.abstractmethod
    def invariants(self) -> PyTree[Array]:
        """Quantities conserved by gradient flow on this model (THEORY §2.7 [DU])."""


class AbstractPredictorModel(AbstractModel):
    """A model with an end-to-end weight vector ``w̃(θ)`` in input space (THEORY §2.1, §2.5)."""

    @abc.abstractmethod
    def predictor(self) -> Float[Array, " d"]:
        """The end-to-end weight ``w̃(θ)``; for models linear in ``x``, the linear predictor."""


class AbstractLinearModel(AbstractPredictorModel):
    """A model that is linear in its input: ``f(x) = <predictor(), x>`` (THEORY §2.1)."""

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return jnp.dot(self.predictor(), x)


def batch_outputs(model: AbstractModel, X: Float[Array, "n d"]) -> Float[Array, " n"]:
    """``model`` applied to every row of ``X``."""
    return jax.vmap(model)(X)
