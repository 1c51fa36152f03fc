"""``minimize_regularizer``: ``argmin Q(w) s.t. Xw = b`` exactly, with a certificate
([THEORY §2.1][theory-2-1] item 5, [§2.3][theory-2-3] solver tip, [§5][theory-5])."""

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .. import _checks
from .._lapack import after
from .._newton import AbstractNewtonProblem, Armijo, Direction, Point, damped_newton
from .._result import AbstractResult
from .._status import Status
from .regularizers.base import (
    AbstractLegendreRegularizer,
    AbstractLinearProgramRegularizer,
    AbstractRegularizer,
)


class RegularizerMinimum(AbstractResult):
    """The minimizer of a regularizer over its interpolation set, with its certificate.

    **Fields:**
    - `w`: (d,) the minimizer. `nu`: (n,) the dual variable, ``∇Q(w) = Xᵀν`` (for ℓ1: an
      optimal solution of the dual LP ``max ⟨b, ν⟩ s.t. ‖Xᵀν‖_∞ ≤ 1``).
    - `feasibility`: ``‖Xw − b‖₂`` (``b = Q.interpolation_targets(y)``).
    - `stationarity`: the distance of ``∇Q(w)`` (evaluated afresh at ``w``) from ``range Xᵀ``,
      ``‖(I − Xᵀ(XXᵀ)⁻¹X)∇Q(w)‖₂``; since ``∇Q(w₀) = 0`` for the regularizers of
      `implicit_bias` this is the distance of ``∇Q(w) − ∇Q(w₀)`` from ``range Xᵀ``. For ℓ1:
      ``max(‖Xᵀν‖_∞ − 1, 0) + max_{wᵢ≠0} |(Xᵀν)ᵢ − sign(wᵢ)|`` (dual feasibility and
      complementary slackness).
    - `steps`: Newton steps taken (0 for ℓ1). `status`: a `Status` item.
    """

    w: Float[Array, " d"]
    nu: Float[Array, " n"]
    feasibility: Float[Array, ""]
    stationarity: Float[Array, ""]
    steps: Int[Array, ""]
    status: Status


def _range_residual(X, g):
    """``‖(I − Xᵀ(XXᵀ)⁻¹X) g‖`` via a lineax Cholesky solve on the Gram matrix."""
    gram = lx.MatrixLinearOperator(X @ X.T, lx.positive_semidefinite_tag)
    coef = lx.linear_solve(gram, X @ g, solver=lx.Cholesky(), throw=False).value
    return jnp.linalg.norm(g - X.T @ coef)


class _Dual(AbstractNewtonProblem):
    """The dual ``F(ν) = Q*(Xᵀν) − ⟨ν, b⟩`` (convex, ``∇F = Xw(ν) − b`` with
    ``w(ν) = (∇Q)⁻¹(Xᵀν)``) as a `damped_newton` problem: merit F, ``aux = (w, Xw − b)``."""

    Q: AbstractLegendreRegularizer
    X: Float[Array, "n d"]
    b: Float[Array, " n"]
    gram: Float[Array, "n n"]  # XXᵀ
    rtol: Float[Array, ""]

    def evaluate(self, nu):
        z = self.X.T @ nu
        w = self.Q.grad_inverse(z)
        return self.Q.conjugate(z) - jnp.dot(nu, self.b), (w, self.X @ w - self.b)

    def trial(self, point, direction, t):
        nu = point.x + t * direction.step
        z, step_z = self.X.T @ nu, self.X.T @ direction.step
        w, dw = jax.jvp(self.Q.grad_inverse, (z,), (step_z,))
        # A trial counts only where Q* is curved along the step: this keeps the iterates where
        # Q* is strictly convex (outside the flat subdifferential ball of a conic point, e.g.
        # the single neuron with δ < 0, [THEORY §2.4][theory-2-4]), where the Newton model is
        # meaningful; the minimizer lies there whenever b ≠ 0.
        value = jnp.where(jnp.dot(step_z, dw) > 0, self.Q.conjugate(z) - jnp.dot(nu, self.b),
                          jnp.inf)
        return Point(nu, value, (w, self.X @ w - self.b))

    def direction(self, point, memo):
        nu, (_, r) = point.x, point.aux
        # ∇²F = X ∇²Q*(Xᵀν) Xᵀ; ∇²Q* Xᵀ by n Jacobian-vector products of (∇Q)⁻¹ (the Jacobian
        # is diagonal or diagonal + rank one for every regularizer here: O(nd) each).
        _, jvp = jax.linearize(self.Q.grad_inverse, self.X.T @ nu)
        hess = self.X @ jax.vmap(jvp, in_axes=1, out_axes=1)(self.X.T)
        hess = (hess + hess.T) / 2
        op = lx.MatrixLinearOperator(hess, lx.positive_semidefinite_tag)
        newton = -lx.linear_solve(op, r, solver=lx.Cholesky(), throw=False).value
        # Where ∇²Q* vanishes (the subdifferential ball of a conic point, e.g. the single
        # neuron with δ < 0, [THEORY §2.4][theory-2-4]) F is locally linear and the Newton system
        # singular: step along the gradient in the metric XXᵀ instead (the line search sizes it).
        # (Solved after the Newton system: no two LAPACK calls at once, `ibflow._lapack`.)
        gram = lx.MatrixLinearOperator(self.gram, lx.positive_semidefinite_tag)
        fallback = -lx.linear_solve(gram, after(newton, r), solver=lx.Cholesky(),
                                    throw=False).value
        step = jnp.where(jnp.all(jnp.isfinite(newton)), newton, fallback)
        scale = jnp.abs(self.Q.conjugate(self.X.T @ nu)) + jnp.abs(jnp.dot(nu, self.b))
        return Direction(step=step, slope=jnp.dot(r, step),
                         slack=64 * jnp.finfo(self.X.dtype).eps * scale)

    def converged(self, point, memo):
        w, r = point.aux
        # Per-equation roundoff scale of ⟨xᵢ, w⟩ − bᵢ.
        scale = jnp.abs(self.X) @ jnp.abs(w) + jnp.abs(self.b)
        return jnp.all(jnp.abs(r) <= self.rtol * scale)

    def refine(self, previous, point, accepted, t, direction, status):
        return point, previous.memo, status


#: Halvings of the dual's line search: step lengths down to 2⁻⁹⁹⁷ < 1e-300.
_DUAL_SEARCH = Armijo(c=1e-4, max_trials=998)


@eqx.filter_jit
def _dual_newton(Q, X, b, rtol, max_steps):
    problem = _Dual(Q=Q, X=X, b=b, gram=X @ X.T, rtol=rtol)
    out = damped_newton(problem, jnp.zeros(X.shape[0], dtype=X.dtype), search=_DUAL_SEARCH,
                        max_steps=max_steps)
    (w, r), nu = out.point.aux, out.point.x
    feasibility = jnp.linalg.norm(r)
    stationarity = _range_residual(X, Q.grad(w))
    status = Status.where(jnp.isfinite(feasibility) & jnp.all(jnp.isfinite(w)), out.status,
                          Status.singular)
    return RegularizerMinimum(w=w, nu=nu, feasibility=feasibility, stationarity=stationarity,
                              steps=out.steps, status=status)


@jax.jit
def _singular_values(X):
    return jnp.linalg.svd(X, compute_uv=False)


def _minimize_on_host(Q, X, b):
    X, b = np.asarray(X, dtype=float), np.asarray(b, dtype=float)
    w, nu, stationarity = Q.solve_interpolation(X, b)
    return RegularizerMinimum(
        w=jnp.asarray(w), nu=jnp.asarray(nu), feasibility=jnp.asarray(np.linalg.norm(X @ w - b)),
        stationarity=jnp.asarray(stationarity), steps=jnp.asarray(0),
        status=Status.converged)


def checked_interpolation_data(X, y, caller: str):
    """Validate an interpolation problem: finite data, n <= d, and (when `X` is concrete)
    rank X = n; shared by every solver of ``argmin Q s.t. Xw = y``."""
    X, y = _checks.data(X, y)
    n, d = X.shape
    if n > d:
        raise ValueError(f"{caller} needs n <= d (an underdetermined system); got "
                         f"n = {n} > d = {d}.")
    if not _checks.is_traced(X):
        with jax.ensure_compile_time_eval():  # X is concrete even inside an outer jit
            sv = np.asarray(_singular_values(X))
        rank = int(np.sum(sv > sv[0] * max(n, d) * np.finfo(sv.dtype).eps))
        if rank < n:
            raise ValueError(f"X has rank {rank} < n = {n}: the interpolation constraint Xw = y is "
                             "infeasible for generic y (and degenerate otherwise); drop "
                             "dependent rows.")
    return X, y


#: Smallest `rtol` whose stopping test means something in float64 (4 ulps).
_MIN_RTOL = 4 * float(np.finfo(np.float64).eps)


def _check_dimension(Q: AbstractRegularizer, d: int):
    """Every vector leaf of `Q` (k, w₀, anchor, weights, …) has the length d of the data."""
    for leaf in jax.tree_util.tree_leaves(eqx.filter(Q, eqx.is_array)):
        if jnp.ndim(leaf) == 1 and jnp.shape(leaf)[0] != d:
            raise ValueError(f"Q ({type(Q).__name__}) was built for dimension "
                             f"{jnp.shape(leaf)[0]} but X has d = {d} columns; build Q from a "
                             "model of the data's input dimension.")
        if jnp.ndim(leaf) > 1:
            raise ValueError(f"Q ({type(Q).__name__}) holds an array of shape "
                             f"{jnp.shape(leaf)}: a batch of regularizers; jax.vmap over Q "
                             "instead of passing the batch.")


def minimize_regularizer(
    Q: AbstractRegularizer, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    rtol: Float[ArrayLike, ""] = 1e-12, max_steps: int = 500, throw: bool = True,
) -> RegularizerMinimum:
    """``argmin Q(w)`` over the interpolation set ``{w : Xw = b}``,
    ``b = Q.interpolation_targets(y)``
    (``b = y`` except for the leaky neuron, [THEORY AZ-T4][theory-az-t4]), with a certificate.

    For a strictly convex `Q` (`AbstractLegendreRegularizer`) it solves the dual: the KKT
    conditions ``∇Q(w) = Xᵀν``, ``Xw = b`` give ``w(ν) = (∇Q)⁻¹(Xᵀν)`` with ν the minimizer of
    the smooth convex ``F(ν) = Q*(Xᵀν) − ⟨ν, b⟩`` over ``ℝⁿ`` (``∇F = Xw(ν) − b``,
    ``∇²F = X∇²Q*Xᵀ``). Newton's method on F, damped by an Armijo backtracking line search on
    F itself, starts from ν = 0 (that is, from ``w₀``, since ``∇Q(w₀) = 0``); the line search
    is what makes small ``k`` and large ``|δ|`` safe: an overflowing trial point has
    ``F = +inf`` and is rejected ([THEORY §2.3][theory-2-3] solver tip). The Newton systems are
    solved by lineax (Cholesky). The loop is ibflow's one damped Newton routine
    (`ibflow._newton.damped_newton`): optimistix 0.1.0 has no minimiser that combines an exact
    Hessian with a line search (`optx.Newton` is an undamped root finder, `optx.BFGS`
    approximates the Hessian and needs many more steps to reach 1e-12).

    It stops when every equation holds to ``rtol`` times its roundoff scale
    ``Σⱼ|Xᵢⱼwⱼ| + |bᵢ|``. Jittable and vmappable over `Q`, `X`, `y` (statuses per member).

    Limits of the method: each damped step gains a bounded amount of ``log(1/k)``, so the
    steps grow like ``log(1/k)`` for very small diagonal-net ``k`` (tiny α), and far enough out
    the step budget runs out (status ``budget_exhausted``; a continuation in k is not
    implemented). The single neuron with strongly negative δ is the hard case: its conjugate
    ``½(‖u‖² + δ)₊^{3/2}`` is flat on a ball of radius ``sqrt(−δ)`` and the solution sits just
    outside it, so the dual's curvature changes by orders of magnitude over one Newton step; for
    large ``|δ|`` the method slows and can stall (status ``budget_exhausted``, never a silent
    answer). A better-conditioned formulation for δ ≪ 0 (e.g. in the radial variable
    ``t = ‖u‖² + δ``) is left open.

    For a polyhedral `Q` (`AbstractLinearProgramRegularizer`, e.g. `L1Norm`) it asks `Q` to
    solve the linear program (``Q.solve_interpolation``: ``ibflow.min_l1_interpolant`` for w,
    the dual LP for ν); that path runs on the host and is neither jittable nor vmappable.

    **Arguments:**
    - `Q`: a regularizer (e.g. from `ibflow.implicit_bias`).
    - `X`: (n, d) with full row rank n ≤ d; `y`: (n,) targets.
    - `rtol`: relative tolerance on the constraint, at least ``4ε ≈ 8.9e-16`` (smaller values
      cannot be verified in float64 and are refused); `max_steps`: Newton step budget ≥ 1.
    - `throw`: raise if the status is not `converged` (with ``False``, read the status).

    **Returns:** a `RegularizerMinimum` (w, ν, feasibility, stationarity, steps, status).

    **Raises:** ``ValueError`` for malformed data and, when `X` is concrete, for
    ``rank X < n`` (the constraint is then either infeasible for generic y or has a
    non-unique dual; either way this is not a well-posed interpolation problem).
    """
    if not isinstance(Q, AbstractRegularizer):
        raise ValueError(f"Q must be an ibflow regularizer; got {type(Q).__name__}.")
    max_steps = _checks.width(max_steps, "max_steps")
    # Below a few ulps the stopping test can only pass by an accidental exact cancellation in
    # one rounding of Xw − b, which another evaluation order would not reproduce.
    rtol = _checks.real_scalar(rtol, "rtol")
    rtol = _checks._check(rtol, lambda a: ~(a >= _MIN_RTOL),
                          f"rtol must be >= {_MIN_RTOL:.1e} (a few float64 ulps); a smaller "
                          "tolerance cannot be verified in floating point.")
    X, y = checked_interpolation_data(X, y, "minimize_regularizer")
    _check_dimension(Q, X.shape[1])
    b = Q.interpolation_targets(y)
    if isinstance(Q, AbstractLinearProgramRegularizer):
        if _checks.is_traced(X) or _checks.is_traced(y):
            raise ValueError(f"minimize_regularizer({type(Q).__name__}(), ...) solves a linear "
                             "program on the host; call it outside jit/vmap.")
        return _minimize_on_host(Q, X, b)
    if not isinstance(Q, AbstractLegendreRegularizer):
        raise ValueError(f"{type(Q).__name__} has no gradient inverse; minimize_regularizer "
                         "supports Legendre-type regularizers and linear-program ones "
                         "(L1Norm).")
    out = _dual_newton(Q, X, b, jnp.asarray(rtol, dtype=float), max_steps)
    if throw:
        out = eqx.error_if(out, out.status != Status.converged,
                           "minimize_regularizer did not converge (see RegularizerMinimum.status; "
                           "pass throw=False to get the result anyway).")
    return out
