"""The diagonal network's gradient flow reduced to an n-dimensional ODE (THEORY §2.3)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._tail.jacobian import DenseJacobian
from .base import AbstractConvexGradientDynamics


class DiagonalReducedDynamics(AbstractConvexGradientDynamics):
    """Gradient flow of the diagonal net on the square loss, reduced to ``ν ∈ ℝⁿ``.

    By THEORY §2.3, ``w(t) = P e^ρ − N e^{−ρ}`` with ``ρ = Xᵀν`` and
    ``dν/dt = −(2/n)(X w(ν) − y)``, ``ν(0) = 0``. Same time variable, same path, but the state is n
    numbers instead of 4d and batched members share ``X``, so ``Xᵀν`` becomes a matmul.

    ``w`` is evaluated as ``w₀ cosh ρ + K sinh ρ`` (``w₀ = P − N`` the initial predictor,
    ``K = P + N``): the same function without the cancellation of ``P e^ρ − N e^{−ρ}`` when
    ``P ≈ N`` are huge (α = 1e30). The Jacobian is closed form (THEORY §8.1):
    ``−(2/n) X diag(w₀ sinh ρ + K cosh ρ) Xᵀ``, one n²d product instead of n JVPs.

    It is the gradient flow ``ν̇ = −(2/n)∇D(ν)`` of the strictly convex dual
    ``D(ν) = Σⱼ Pⱼ e^{ρⱼ} + Nⱼ e^{−ρⱼ} − ⟨y, ν⟩`` (P, N ≥ 0, X of full row rank), so its tail
    can be finished by Newton's method (`AbstractConvexGradientDynamics`).
    """

    initial: eqx.Module  # a DiagonalNet
    X: Float[Array, "n d"]
    y: Float[Array, " n"]

    def _coefficients(self):
        p, m = self.initial.exp_coefficients()
        return self.initial.predictor(), p + m

    def _predictor(self, nu):
        w0, k = self._coefficients()
        rho = self.X.T @ nu
        return w0 * jnp.cosh(rho) + k * jnp.sinh(rho)

    def data_loss(self, model):
        return 0.5 * jnp.mean((jax.vmap(model)(self.X) - self.y) ** 2)

    def initial_state(self):
        return jnp.zeros(self.X.shape[0], dtype=self.X.dtype)

    def model(self, state):
        return self.initial.transported(self.X.T @ state)

    def _residual(self, state):
        return self.X @ self._predictor(state) - self.y

    def loss(self, state):
        return 0.5 * jnp.mean(self._residual(state) ** 2)

    def time(self, c, state):
        return c

    def vector_field(self, c, state, args):
        return -(2.0 / self.X.shape[0]) * self._residual(state)

    def loss_and_field(self, state):
        r = self._residual(state)  # one Xᵀν, one predictor, one Xw for both
        return 0.5 * jnp.mean(r**2), -(2.0 / self.X.shape[0]) * r

    def linearization(self, c, state, args):
        w0, k = self._coefficients()
        rho = self.X.T @ state
        slope = w0 * jnp.sinh(rho) + k * jnp.cosh(rho)
        return DenseJacobian(-(2.0 / self.X.shape[0]) * (self.X * slope) @ self.X.T)
