"""Abstract model classes and the optional capabilities a model can offer.

ibflow integrates **any** Equinox module whose ``__call__(x)`` takes one example and returns a
scalar (batch with ``jax.vmap(model)(X)``); its inexact array leaves are its parameters. No base
class is required. The classes here are optional capabilities that generic code asks for:
a `predictor()` (end-to-end weight), `invariants()` (conserved quantities), a closed-form
reduction of the flow (`reduced_dynamics`), a cost estimate for sweeps.

Leaves that are *not* trained (a fixed second layer, an activation slope) are still array
leaves, so they can be swept without recompiling, but the model wraps them in
``jax.lax.stop_gradient`` so every flow leaves them constant.
"""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree


class AbstractModel(eqx.Module):
    """A scalar-output model of one example (subclassing it is optional)."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        """The model's output on one example ``x``."""


class AbstractInvariantModel(AbstractModel):
    """A model with quantities conserved by gradient flow (THEORY §2.7 [DU])."""

    @abc.abstractmethod
    def invariants(self) -> PyTree[Array]:
        """The conserved quantities at the current parameters."""


class AbstractPredictorModel(AbstractModel):
    """A model with an end-to-end weight vector ``w̃(θ)`` in input space (THEORY §2.1, §2.5)."""

    @abc.abstractmethod
    def predictor(self) -> Float[Array, " d"]:
        """The end-to-end weight ``w̃(θ)``; for models linear in ``x``, the linear predictor."""


class AbstractLinearModel(AbstractPredictorModel):
    """A model that is linear in its input: ``f(x) = <predictor(), x>`` (THEORY §2.1)."""

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return jnp.dot(self.predictor(), x)


class AbstractReducibleModel(AbstractModel):
    """A model that offers a closed-form reduction of some flows to a smaller ODE."""

    @abc.abstractmethod
    def reduced_dynamics(self, X, y, flow, loss):
        """An `AbstractDynamics` integrating ``flow`` on ``loss`` from ``self`` in reduced
        coordinates, or None when no reduction applies to this flow and loss."""
