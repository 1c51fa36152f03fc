"""Abstract model classes and the optional capabilities a model can offer.

ibflow integrates **any** Equinox module whose ``__call__(x)`` takes one example and returns a
scalar (batch with ``jax.vmap(model)(X)``); its inexact array leaves are its parameters. No base
class is required. The classes here are optional capabilities that generic code asks for:
a `predictor()` (end-to-end weight), `invariants()` (conserved quantities), a closed-form
reduction of the flow (`reduced_dynamics`), its exact implicit regularizer (`implicit_bias`), its
predictor-space metric (`inverse_metric_field`), a cost estimate for sweeps. A new model brings
its own theory by implementing these; no generic code names a concrete model.

Layering (`docs/architecture.md`): models sit above the dynamics, the regularizers and the metric
fields (a model builds its own reduction, regularizer and metric from them) and below the
formulations, the engine and the theory's solvers, which ask models for capabilities.

Leaves that are *not* trained (a fixed second layer, an activation slope) are still array
leaves, so they can be swept without recompiling, but the model wraps them in
``jax.lax.stop_gradient`` so every flow leaves them constant.
"""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._theory.metrics import AbstractInverseMetricField
from .._theory.regularizers.base import AbstractRegularizer


class AbstractModel(eqx.Module):
    """A scalar-output model of one example (subclassing it is optional)."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        """The model's output on one example ``x``."""


class AbstractInvariantModel(AbstractModel):
    """A model with quantities conserved by gradient flow ([THEORY §2.7][theory-2-7]
    [DU][theory-du])."""

    @abc.abstractmethod
    def invariants(self) -> PyTree[Array]:
        """The conserved quantities at the current parameters."""


class AbstractPredictorModel(AbstractModel):
    """A model with an end-to-end weight vector ``w̃(θ)`` in input space ([THEORY §2.1][theory-2-1],
    [§2.5][theory-2-5])."""

    @abc.abstractmethod
    def predictor(self) -> Float[Array, " d"]:
        """The end-to-end weight ``w̃(θ)``; for models linear in ``x``, the linear predictor."""


class AbstractLinearModel(AbstractPredictorModel):
    """A model that is linear in its input: ``f(x) = <predictor(), x>``
    ([THEORY §2.1][theory-2-1])."""

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return jnp.dot(self.predictor(), x)


class AbstractReducibleModel(AbstractModel):
    """A model that offers a closed-form reduction of some flows to a smaller ODE."""

    @abc.abstractmethod
    def reduced_dynamics(self, X, y, flow, loss):
        """An `AbstractDynamics` integrating ``flow`` on ``loss`` from ``self`` in reduced
        coordinates, or None when no reduction applies to this flow and loss."""


class AbstractImplicitBiasModel(AbstractModel):
    """A model whose gradient flow on the square loss has a known exact implicit regularizer
    ([THEORY §2.3–§2.5][theory-2-3]); `ibflow.implicit_bias` asks for it."""

    @abc.abstractmethod
    def implicit_bias(self, *, final_sign: Float[ArrayLike, ""] | None = None
                      ) -> AbstractRegularizer:
        """The regularizer ``Q`` with ``w(∞) = argmin Q s.t. Xw = b`` for the flow started at
        ``self``. `final_sign`: the sign of the second layer at the end, for models whose
        regularizer depends on it (else None, and a ``ValueError`` when given). Raises
        `NoExactRegularizer` where this instance has none (e.g. several hidden neurons)."""

    @abc.abstractmethod
    def implicit_bias_sign(self) -> Float[Array, ""] | None:
        """Read off ``self`` as the model at the *end* of training: the `final_sign` to pass to
        `implicit_bias` of the initialization (the sign of the second layer), or None where the
        regularizer does not depend on it."""


class AbstractMetricFieldModel(AbstractPredictorModel):
    """A model whose predictor-space inverse metric ``J Jᵀ`` is a closed-form function of the
    predictor on its invariant manifold ([THEORY §2.1][theory-2-1]); the Hessian-map test
    (`ibflow.inverse_metric_field`) asks for it."""

    @abc.abstractmethod
    def inverse_metric_field(self) -> AbstractInverseMetricField:
        """``M(w̃)`` with the conserved quantities of ``self``; ``ValueError`` where this instance
        has none (several hidden neurons, [§2.6][theory-2-6])."""
