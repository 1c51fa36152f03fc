"""[LM-B][theory-lm-b]: absolute-value networks, scaled potential — a convex problem solved by
Newton."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._models.shallow import AbstractBiasDistribution, UniformBias
from .._newton import AbstractNewtonProblem, Armijo, Direction, Point, damped_newton
from .._potentials.base import AbstractPotential
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
    complement ``A H⁻¹ Aᵀ`` per step (ibflow's one damped Newton routine,
    `ibflow._newton.damped_newton`). Stops when the Newton decrement ``λ²/2`` falls below
    ``tol · max(1, objective)``; otherwise `status` is `Status.budget_exhausted` (or
    `Status.line_search_failed` where no step length down to 2⁻³⁴ decreases the objective).

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


class _Constrained(AbstractNewtonProblem):
    """``min Σ ω_j p_j D_φ(β_j/(2p_j), 0)`` s.t. ``Aβ = h`` as a `damped_newton` problem from a
    feasible point: merit the objective; the memo holds the last Newton decrement ``λ²/2``."""

    A: Float[Array, "m N"]
    h: Float[Array, " m"]
    w: Float[Array, " N"]
    p: Float[Array, " N"]
    phi: AbstractPotential
    tol: Float[Array, ""]

    def evaluate(self, beta):
        return jnp.sum(self.w * self.p * self.phi.bregman(beta / (2 * self.p), jnp.zeros(()))), None

    def trial(self, point, direction, t):
        beta = point.x + t * direction.step
        return Point(beta, *self.evaluate(beta))

    def direction(self, point, memo):
        beta, A = point.x, self.A
        g = 0.5 * self.w * (self.phi.derivative(beta / (2 * self.p))
                            - self.phi.derivative(jnp.zeros(())))
        hinv = 1.0 / _hessian(self.w, self.p, self.phi, beta)
        schur = (A * hinv[None, :]) @ A.T
        nu = -jnp.linalg.solve(schur, self.h - A @ beta + A @ (hinv * g))
        step = -hinv * (g + A.T @ nu)
        return Direction(step=step, slope=g @ step)

    def converged(self, point, memo):
        return memo <= self.tol * jnp.maximum(1.0, point.value)

    def refine(self, previous, point, accepted, t, direction, status):
        return point, -0.5 * direction.slope, status


def _hessian(w, p, phi, beta):
    """The objective's Hessian, diagonal (N,)."""
    return w * phi.second_derivative(beta / (2 * p)) / (4 * p)


@eqx.filter_jit
def _solve(x, h, t, w, bias, phi, max_iter, tol):
    p = bias.density(t)
    A = 0.5 * w[None, :] * jnp.abs(x[:, None] - t[None, :])
    # Feasible start: the quadratic problem (φ ≈ φ(0) + φ'(0)u + φ''(0)u²/2), one solve.
    hinv0 = 1.0 / _hessian(w, p, phi, jnp.zeros_like(t))
    beta0 = hinv0 * (A.T @ jnp.linalg.solve((A * hinv0[None, :]) @ A.T, h))
    out = damped_newton(_Constrained(A=A, h=h, w=w, p=p, phi=phi, tol=tol), beta0,
                        search=Armijo(c=0.25, max_trials=35), max_steps=max_iter,
                        memo=jnp.array(jnp.inf))
    zero = jnp.zeros(())
    return VariationalSolution(
        grid=t, weights=w, curvature=out.point.x, intercept=zero, slope=zero,
        objective=out.point.value, status=out.status, activation="abs")
