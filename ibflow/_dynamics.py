"""The ODE that ``integrate`` hands to Diffrax: a state, its vector field, and the map back to a
model. Two implementations: the generic one in parameter space, and the closed-form reduction of
the diagonal network to an n-dimensional ODE (THEORY §2.3)."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ._flows.base import AbstractFlow
from ._losses import AbstractLoss
from ._models.base import AbstractModel
from ._models.diagonal import DiagonalNet


class AbstractDynamics(eqx.Module):
    initial: eqx.AbstractVar[AbstractModel]
    X: eqx.AbstractVar[Float[Array, "n d"]]
    y: eqx.AbstractVar[Float[Array, " n"]]

    @abc.abstractmethod
    def initial_state(self) -> PyTree[Array]: ...

    @abc.abstractmethod
    def vector_field(self, t, state, args) -> PyTree[Array]: ...

    @abc.abstractmethod
    def model(self, state) -> AbstractModel: ...

    @abc.abstractmethod
    def loss(self, state) -> Float[Array, ""]: ...


class ParameterDynamics(AbstractDynamics):
    """``dθ/dt = flow.velocity(θ, θ₀, ∇L(θ), L(θ))`` on the model's inexact-array leaves."""

    initial: AbstractModel
    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    flow: AbstractFlow
    loss_fn: AbstractLoss

    def _loss_of(self, model):
        return self.loss_fn(jax.vmap(model)(self.X), self.y)

    def initial_state(self):
        return eqx.filter(self.initial, eqx.is_inexact_array)

    def model(self, state):
        return eqx.combine(state, eqx.filter(self.initial, eqx.is_inexact_array, inverse=True))

    def loss(self, state):
        return self._loss_of(self.model(state))

    def vector_field(self, t, state, args):
        model = self.model(state)
        value, grad = eqx.filter_value_and_grad(self._loss_of)(model)
        return self.flow.velocity(model, self.initial, grad, value)


class DiagonalReducedDynamics(AbstractDynamics):
    """Gradient flow of the diagonal net on the square loss, reduced to ``ν ∈ ℝⁿ``.

    By THEORY §2.3, ``w(t) = P e^ρ − N e^{−ρ}`` with ``ρ = Xᵀν`` and
    ``dν/dt = −(2/n)(X w(ν) − y)``, ``ν(0) = 0``. Same time variable, same path, but the state is n
    numbers instead of 4d and batched members share ``X``, so ``Xᵀν`` becomes a matmul.
    """

    initial: DiagonalNet
    X: Float[Array, "n d"]
    y: Float[Array, " n"]

    def _predictor(self, nu):
        p, m = self.initial.exp_coefficients()
        rho = self.X.T @ nu
        return p * jnp.exp(rho) - m * jnp.exp(-rho)

    def initial_state(self):
        return jnp.zeros(self.X.shape[0], dtype=self.X.dtype)

    def model(self, state):
        return self.initial.transported(self.X.T @ state)

    def loss(self, state):
        return 0.5 * jnp.mean((self.X @ self._predictor(state) - self.y) ** 2)

    def vector_field(self, t, state, args):
        return -(2.0 / self.X.shape[0]) * (self.X @ self._predictor(state) - self.y)
