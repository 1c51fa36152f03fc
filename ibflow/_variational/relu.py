"""[LM-G][theory-lm-g]: ReLU networks, unscaled potential — a quadratic problem solved exactly."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from .._models.shallow import AbstractBiasDistribution, UniformBias
from .._status import Status
from .solution import VariationalSolution, check_data, midpoint_grid


def relu_variational(
    x: Float[ArrayLike, " m"], h: Float[ArrayLike, " m"], *,
    bias: AbstractBiasDistribution = UniformBias(2.0), num_grid: int = 1500,
) -> VariationalSolution:
    """``argmin 𝒢₁ + 𝒢₂ + 𝒢₃`` over ``F_ReLU`` subject to ``g(x_i) = h_i``
    ([THEORY LM-G][theory-lm-g]).

    ``𝒢₁ = ∫ g''²/p_B``, ``𝒢₂ = (g'(+∞) + g'(−∞))²``, ``𝒢₃ = σ_B⁻²(∫ g''(x)|x| dx − 2g(0))²``:
    the infinite-width limit of ReLU networks trained by mirror flow with an unscaled potential
    (any φ with φ''(0) > 0; the limit does not depend on φ) from ``a(0) = d(0) = 0``, ``w = ±1``,
    ``b ~ p_B`` symmetric. Pass ``h = y − f(x, θ(0))``: the penalty is on the change of function.

    Discretization: ``g = c₀ + c₁x + Σ ω_j β_j (x − t_j)₊`` on `num_grid` midpoint cells of
    ``bias.interval()``; then ``𝒢₂ = (2c₁ + Σωβ)²`` and ``𝒢₃ = σ_B⁻²(Σ ω_j β_j t_j − 2c₀)²`` and the
    problem is an equality-constrained quadratic program, solved from its KKT system.

    **Arguments:** `x` (m,) or (m, 1) distinct inputs inside the support of p_B; `h` (m,) targets;
    `bias` the distribution p_B; `num_grid` the number of cells N.
    """
    x, h = check_data(x, h)
    t, w = midpoint_grid(bias, num_grid)
    return _solve(x, h, t, w, bias)


@eqx.filter_jit
def _solve(x, h, t, w, bias):
    n_grid, m = t.shape[0], x.shape[0]
    p = bias.density(t)
    A = jnp.concatenate([w[None, :] * jax.nn.relu(x[:, None] - t[None, :]),
                         jnp.ones((m, 1)), x[:, None]], axis=1)
    zeros2 = jnp.zeros(2)
    v = jnp.concatenate([w, jnp.array([0.0, 2.0])])  # 𝒢₂ = (v·z)²
    q = jnp.concatenate([w * t, jnp.array([-2.0, 0.0])])  # 𝒢₃ = (q·z)²/σ²
    Q = (jnp.diag(jnp.concatenate([w / p, zeros2])) + jnp.outer(v, v)
         + jnp.outer(q, q) / bias.second_moment())
    kkt = jnp.block([[2 * Q, A.T], [A, jnp.zeros((m, m))]])
    rhs = jnp.concatenate([jnp.zeros(n_grid + 2), h])
    solution = jnp.linalg.solve(kkt, rhs)
    # A singular KKT system (repeated inputs, a degenerate grid) gives non-finite values or a
    # solution that does not satisfy it; either is reported, never a silent "converged".
    residual = jnp.linalg.norm(kkt @ solution - rhs) / jnp.maximum(1.0, jnp.linalg.norm(rhs))
    solved = jnp.all(jnp.isfinite(solution)) & (residual <= 1e-8)
    z = solution[: n_grid + 2]
    return VariationalSolution(
        grid=t, weights=w, curvature=z[:n_grid], intercept=z[n_grid], slope=z[n_grid + 1],
        objective=z @ Q @ z, status=Status.where(solved, Status.converged, Status.singular),
        activation="relu")
