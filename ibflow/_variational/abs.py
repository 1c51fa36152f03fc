"""[LM-B][theory-lm-b]: absolute-value networks, scaled potential — a convex problem solved by
Newton."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._models.shallow import AbstractBiasDistribution, UniformBias
from .._potentials.base import AbstractPotential
from .._status import Status
from .solution import VariationalSolution, check_data, midpoint_grid


def abs_variational(
    x: Float[ArrayLike, " m"], h: Float[ArrayLike, " m"], *, potential: AbstractPotential,
    bias: AbstractBiasDistribution = UniformBias(2.0), num_grid: int = 1500,
    max_iter: int = 100, tol: Float[ArrayLike, ""] = 1e-13,
) -> VariationalSolution:
    """``argmin ∫ D_φ(g''/(2p_B), 0) p_B dx`` over ``F_Abs`` s.t. ``g(x_i) = h_i``
    ([THEORY LM-B][theory-lm-b]).

    The infinite-width limit of |·| networks trained by mirror flow with the width-scaled
    potential ``Φ = n⁻² Σ φ(nΔθ)`` from ``a(0) = d(0) = 0``. Pass ``h = y − f(x, θ(0))``.

    Discretization: ``g = ½ Σ ω_j β_j |x − t_j|`` (exact for ``F_Abs``, [LM-F][theory-lm-f]);
    objective ``Σ ω_j p_j D_φ(β_j/(2p_j), 0)``, separable and strictly convex. Solved by Newton's
    method with equality constraints (Boyd–Vandenberghe §10.2) from the feasible quadratic solution
    (φ replaced by its second-order expansion at 0), Armijo backtracking, the m×m Schur
    complement ``A H⁻¹ Aᵀ`` per step. Stops when the Newton decrement ``λ²/2`` falls below
    ``tol · max(1, objective)``; otherwise `status` is `Status.budget_exhausted`.

    **Arguments:** `x` (m,) or (m, 1); `h` (m,); `potential` the convex φ; `bias` p_B (its density
    must be positive on the grid); `num_grid` N; `max_iter` Newton iterations; `tol`.
    """
    if not isinstance(potential, AbstractPotential):
        raise ValueError("potential must be an ibflow potential (e.g. QuarticPotential()).")
    x, h = check_data(x, h)
    t, w = midpoint_grid(bias, num_grid)
    max_iter = _checks.width(max_iter, "max_iter")
    tol = _checks.real_scalar(tol, "tol", positive=True)
    return _solve(x, h, t, w, bias, potential, max_iter, jnp.asarray(tol, dtype=float))


@eqx.filter_jit
def _solve(x, h, t, w, bias, phi, max_iter, tol):
    p = bias.density(t)
    A = 0.5 * w[None, :] * jnp.abs(x[:, None] - t[None, :])
    zero = jnp.zeros(())

    def objective(beta):
        return jnp.sum(w * p * phi.bregman(beta / (2 * p), zero))

    def gradient(beta):
        return 0.5 * w * (phi.derivative(beta / (2 * p)) - phi.derivative(zero))

    def hessian(beta):
        return w * phi.second_derivative(beta / (2 * p)) / (4 * p)

    def newton_direction(beta):
        hinv = 1.0 / hessian(beta)
        g = gradient(beta)
        residual = h - A @ beta
        schur = (A * hinv[None, :]) @ A.T
        nu = -jnp.linalg.solve(schur, residual + A @ (hinv * g))
        return -hinv * (g + A.T @ nu)

    # Feasible start: the quadratic problem (φ ≈ φ(0) + φ'(0)u + φ''(0)u²/2), one solve.
    hinv0 = 1.0 / hessian(jnp.zeros_like(t))
    beta0 = hinv0 * (A.T @ jnp.linalg.solve((A * hinv0[None, :]) @ A.T, h))

    def cond(carry):
        _, it, decrement = carry
        return (it < max_iter) & (decrement > tol * jnp.maximum(1.0, objective(carry[0])))

    def body(carry):
        beta, it, _ = carry
        step = newton_direction(beta)
        slope = gradient(beta) @ step
        f0 = objective(beta)

        def backtrack(s):
            return (objective(beta + s * step) > f0 + 0.25 * s * slope) & (s > 1e-10)

        size = jax.lax.while_loop(backtrack, lambda s: 0.5 * s, jnp.ones(()))
        return beta + size * step, it + 1, -0.5 * slope

    beta, it, decrement = jax.lax.while_loop(cond, body, (beta0, jnp.array(0), jnp.array(jnp.inf)))
    converged = decrement <= tol * jnp.maximum(1.0, objective(beta))
    return VariationalSolution(
        grid=t, weights=w, curvature=beta, intercept=zero, slope=zero, objective=objective(beta),
        status=Status.where(converged, Status.converged, Status.budget_exhausted),
        activation="abs")
