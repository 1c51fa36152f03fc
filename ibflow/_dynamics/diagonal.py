"""The diagonal network's gradient flow reduced to an n-dimensional ODE
([THEORY §2.3][theory-2-3])."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jaxtyping import Array, Float

from .._tail.jacobian import DenseJacobian
from .base import AbstractConvexGradientDynamics

#: The largest pair table (`DiagonalReducedDynamics.newton_table`) that is built, in bytes.
PAIR_TABLE_BYTES = 64 * 2**20
#: The fewest members of a vmapped batch whose Newton matrices are built from the pair table:
#: one product with the n(n+1)/2 × d table reads all of it, which pays off against the
#: members' own n²d products only when it serves several of them.
PAIR_TABLE_BATCH = 16


def _direct_gram(X, slope, table):
    del table  # unbatched (or a table per member): the product itself is cheaper
    return (X * slope) @ X.T


@custom_vmap
def _gram(X, slope, table):
    """``X diag(slope) Xᵀ``. Under `jax.vmap` over `slope` alone (members sharing X) with at
    least `PAIR_TABLE_BATCH` members, one matmul of the members' slopes with the pair table
    ``table[k] = X[i_k] ∘ X[j_k]`` (i_k ≤ j_k): half the flops of the n²d products, and one
    large product in place of many small ones. Otherwise the product itself."""
    return _direct_gram(X, slope, table)


@_gram.def_vmap
def _gram_vmap(axis_size, in_batched, X, slope, table):
    batched_X, batched_slope, batched_table = in_batched
    if batched_slope and not (batched_X or batched_table) and axis_size >= PAIR_TABLE_BATCH:
        n = X.shape[0]
        rows, cols = np.triu_indices(n)
        index = np.zeros((n, n), dtype=np.int32)
        index[rows, cols] = index[cols, rows] = np.arange(rows.size)
        return (slope @ table.T)[:, index], True
    axes = tuple(0 if b else None for b in in_batched)
    return jax.vmap(_direct_gram, in_axes=axes)(X, slope, table), True


def _cosh_sinh(rho):
    """``(cosh ρ, sinh ρ)`` from one exponential: with ``m = expm1(|ρ|) ≥ 0`` and
    ``e = 1 + m``, ``cosh = (e + 1/e)/2`` and ``sinh |ρ| = m (1 + 1/e)/2`` (no cancellation for
    small ρ). Half the cost of ``jnp.cosh`` and ``jnp.sinh`` (two exponentials each), which the
    tail evaluates on every member's d coordinates at each trial point; within a few ulps of
    them, and infinite where they overflow (from |ρ| > 709.78 here, 710.47 there)."""
    m = jnp.expm1(jnp.abs(rho))
    inverse = 1.0 / (1.0 + m)
    return 0.5 * (1.0 + m + inverse), jnp.sign(rho) * (0.5 * m * (1.0 + inverse))


class DiagonalReducedDynamics(AbstractConvexGradientDynamics):
    """Gradient flow of the diagonal net on the square loss, reduced to ``ν ∈ ℝⁿ``.

    By [THEORY §2.3][theory-2-3], ``w(t) = P e^ρ − N e^{−ρ}`` with ``ρ = Xᵀν`` and
    ``dν/dt = −(2/n)(X w(ν) − y)``, ``ν(0) = 0``. Same time variable, same path, but the state is n
    numbers instead of 4d and batched members share ``X``, so ``Xᵀν`` becomes a matmul.

    ``w`` is evaluated as ``w₀ cosh ρ + K sinh ρ`` (``w₀ = P − N`` the initial predictor,
    ``K = P + N``): the same function without the cancellation of ``P e^ρ − N e^{−ρ}`` when
    ``P ≈ N`` are huge (α = 1e30). The Jacobian is closed form ([THEORY §8.1][theory-8-1]):
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
        cosh, sinh = _cosh_sinh(self.X.T @ nu)
        return w0 * cosh + k * sinh

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

    def _slope(self, state):
        """``dw/dρ = w₀ sinh ρ + K cosh ρ`` at ``ρ = Xᵀν``: positive ([THEORY §8.1][theory-8-1])."""
        w0, k = self._coefficients()
        cosh, sinh = _cosh_sinh(self.X.T @ state)
        return w0 * sinh + k * cosh

    def linearization(self, c, state, args):
        slope = self._slope(state)
        return DenseJacobian(-(2.0 / self.X.shape[0]) * (self.X * slope) @ self.X.T)

    def newton_table(self):
        """The products of X's row pairs, ``table[k] = X[i_k] ∘ X[j_k]`` for i_k ≤ j_k
        (n(n+1)/2 × d), or None above `PAIR_TABLE_BYTES`. Built from X alone, so under
        `jax.vmap` over members sharing X it is built once per batch, before Newton's loop,
        and each iteration's matrices are one product with it (`_gram`); a batch too small
        for it, or an unbatched solve, leaves it unused and the compiler drops it."""
        n, d = self.X.shape
        if (n * (n + 1) // 2) * d * self.X.dtype.itemsize > PAIR_TABLE_BYTES:
            return None
        rows, cols = np.triu_indices(n)
        return self.X[rows] * self.X[cols]

    def newton_matrix(self, state, table=None):
        """``(2/n) X diag(w₀ sinh ρ + K cosh ρ) Xᵀ``, from the pair table where one is given
        and the batch is large enough (`_gram`)."""
        # The factor 2/n scales the d slopes, not the n² entries.
        slope = (2.0 / self.X.shape[0]) * self._slope(state)
        if table is None:
            return (self.X * slope) @ self.X.T
        return _gram(self.X, slope, table)
