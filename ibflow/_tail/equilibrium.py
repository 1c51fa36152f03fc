"""The tail of a flow with one attracting equilibrium, finished by Newton's method.

Some reductions are gradient flows of a strictly convex function: the diagonal net's n-dim ODE
is ``ν̇ = −(2/n)∇D(ν)`` with ``D(ν) = Σⱼ Pⱼ e^{ρⱼ} + Nⱼ e^{−ρⱼ} − ⟨y, ν⟩``, ``ρ = Xᵀν``
([THEORY §2.3][theory-2-3]; ``∇²D = X diag(P e^ρ + N e^{−ρ}) Xᵀ ≻ 0`` for X of full row rank). Such
a flow converges from *every* state to the unique root ν* of its vector field, so once the explicit
phase has brought the loss down to the switch level, the rest of the path is irrelevant to the
limit: ν* is found by damped Newton on the vector field (a handful of n × n solves with the
dynamics' closed-form Jacobian) instead of tens of implicit Runge–Kutta steps
([THEORY §8.1][theory-8-1]).

Derivatives: the loop runs on stopped gradients, and a custom JVP on its result carries the
implicit-function derivative ``dν* = −M⁻¹ ∂F`` (M = ∂F/∂ν at ν*), so ``jax.grad`` of anything
computed from the limit is exact, the value is ν* to the last bit, and a forward pass that
differentiates nothing pays for no extra Jacobian.
"""

from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, PyTree

from .. import _checks
from .._dynamics.base import AbstractConvexGradientDynamics
from .._newton import AbstractNewtonProblem, Decrease, Direction, Point, damped_newton
from .._status import Status, phase_status
from .base import AbstractTail

#: Targets at or below this loss (relative to ``mean(y²)/2``) ask for the limit: the path point
#: where the loss crosses them is within ~sqrt(1e-16) = 1e-8 (relative) of the limit, which Newton
#: returns. A larger target is an early stop, reached on the path by the explicit phase.
LIMIT_LEVEL = 1e-16
#: Default path tolerances of the explicit phase before the Newton tail: the limit is the vector
#: field's unique root, reached from wherever the explicit phase stops, so the path tolerance
#: only shapes the path up to the switch (and its time). On the Figure 7.1 grid the limits lie
#: as close to Theorem 1's minimizers (a few 1e-12, relative) at rtol 1e-6 as at 1e-10, and the
#: looser path takes far fewer explicit steps (benchmarks/results/work_precision.md).
DEFAULT_NEWTON_RTOL, DEFAULT_NEWTON_ATOL = 1e-6, 1e-10
#: Default loss level (relative to ``mean(y²)/2``) where the explicit phase hands over to Newton.
#: Newton's basin, for a strictly convex dual, is everything and the limit does not depend on the
#: path, so Newton takes over at 1, the zero predictor's loss: at once from a zero initial
#: predictor. Switching lower gives the same limits and costs more: the explicit phase's steps do
#: not shorten the Newton tail. The level is a hair above 1: ``mean(y²)/2`` from the host and the
#: dynamics' loss at the start are sums in another order, and where the first came out an ulp
#: below the second, three explicit steps ran before Newton (a single `integrate` of the
#: Figure 7.1 data, shape 0.951, scale 0.232).
DEFAULT_NEWTON_SWITCH = 1.0 + 1e-9

#: Shrinkings of the step along one Newton direction, after the full step, before the direction
#: counts as giving no decrease (the `Decrease` search's ``max_trials`` is one more).
MAX_HALVINGS = 30
#: The step's shrink factor after a trial point whose loss is not finite (halving otherwise).
#: Far from the root of an exponential field (a diagonal net at α = 1e-12: −F' ~ α, so the
#: Newton step in ν is ~1e12 where the root is at |ν| ~ 30) halvings alone would need ~40
#: trials through overflowing points; 2⁻⁸ per overflow gets there in ~4.
OVERFLOW_SHRINK = 2.0**-8
#: Levenberg–Marquardt shifts of −F', relative to its largest diagonal entry: the first one
#: tried where the plain Cholesky factor is not finite (−F' singular: X with repeated or
#: dependent rows) or a Newton direction gives no decrease, multiplied by `SHIFT_GROWTH` on
#: each further failure, and given up (`stalled`) above `MAX_SHIFT`. A shift changes the path
#: of the iteration, not its fixed point (the root of F).
MIN_SHIFT, SHIFT_GROWTH, MAX_SHIFT = 1e-12, 1e3, 1.0
#: The loop runs until the dynamics' loss is at most this fraction of the stop level (and
#: reports the level reached where the loss is at most the level itself). The engine's final
#: check recomputes the loss from the returned model (`data_loss`), with other round-off than
#: the reduction's: near shape ±1 the diagonal net's parameters hold w as the difference of two
#: large products, and a stop just under the level failed that check (`budget_exhausted`
#: after one iteration, at shape 0.951 and scale 0.232 of the Figure 7.1 data).
STOP_MARGIN = 0.25


class EquilibriumNewton(AbstractTail):
    """Tail strategy for dynamics with one attracting equilibrium
    (`AbstractConvexGradientDynamics`): damped Newton on the vector field, from the state where
    the explicit phase stopped, until the loss reaches the target.

    **Arguments:** `max_iterations`: Newton iterations at most (each counts as one step of the
    solve's budget). `max_chords`: chord steps at most after each Newton step, reusing its
    factorization while each at least quarters the loss.

    Not for trajectories: the path after the switch is not computed, so ``save_at`` needs a
    Runge–Kutta tail (``stiff_solver="auto"`` picks one then). The limit lies at t = ∞, so
    `Solution.time` and `clock` are ``inf`` where Newton ran.
    """

    max_iterations: int = eqx.field(static=True, default=60)
    max_chords: int = eqx.field(static=True, default=4)
    watches_stiffness: ClassVar[bool] = False
    compacts: ClassVar[bool] = True  # damped_newton's loop compacts under vmap

    def __check_init__(self):
        for name, low in (("max_iterations", 1), ("max_chords", 0)):
            _checks.width(getattr(self, name), f"EquilibriumNewton: {name}", low=low)

    def path_defaults(self):
        return DEFAULT_NEWTON_RTOL, DEFAULT_NEWTON_ATOL, DEFAULT_NEWTON_SWITCH

    def check(self, dynamics, save_at):
        if not isinstance(dynamics, AbstractConvexGradientDynamics):
            raise ValueError("stiff_solver=EquilibriumNewton() needs dynamics with one attracting "
                             "equilibrium (e.g. the diagonal net's reduction); these have none.")
        if save_at is not None:
            raise ValueError("stiff_solver=EquilibriumNewton() does not compute the path after "
                             "the switch, so it cannot fill save_at; use 'auto' or a Diffrax "
                             "solver.")

    def first_stop(self, target_loss, switch_stop, loss_scale):
        # A target above the limit level is an early stop: reached on the path, not by Newton.
        return jnp.where(target_loss > LIMIT_LEVEL * loss_scale, target_loss, switch_stop)

    def run(self, dynamics, first, *, run, stop_at, budget, progress):
        state, iterations, result = newton_phase(dynamics, first.state, stop_at=stop_at,
                                                 budget=budget, tail=self, run=run)
        if progress is not None:
            progress.update(dynamics.loss(state), steps=first.steps + iterations)
        # Newton jumps to the limit, reached at t = ∞ (Solution.time and clock).
        clock = jnp.where(run & (iterations > 0), jnp.inf, first.clock)
        return eqx.tree_at(
            lambda p: (p.state, p.clock, p.steps, p.accepted, p.status), first,
            (state, clock, first.steps + iterations, first.accepted + iterations,
             phase_status(result)))


def _stopped(tree):
    return jax.tree_util.tree_map(lambda a: jax.lax.stop_gradient(a) if eqx.is_array(a) else a,
                                  tree)


def _factor(dynamics, state, shift=None, table=None):
    """Cholesky factor of ``−F'`` (symmetric positive definite: F = −const·∇D, D strictly
    convex; half the work of an LU factorization), or with `shift`, of
    ``−F' + shift · max(diag(−F')) · I``: one factorization either way. Where the factor is not
    finite (``−F'`` singular: X with repeated or dependent rows) the direction is not finite
    and `_Equilibrium.refine` retries from the same point with a larger shift. `table`: the
    dynamics' `newton_table`."""
    matrix = dynamics.newton_matrix(state, table)
    if shift is None:
        return jsl.cho_factor(matrix, lower=True)
    diagonal = jnp.arange(matrix.shape[0])
    # The shift on the diagonal alone: an update in place, not a copy of the matrix.
    shifted = matrix.at[diagonal, diagonal].add(shift * jnp.max(jnp.diagonal(matrix)))
    return jsl.cho_factor(shifted, lower=True)


def _chords(fixed, factor, state, loss, field, active, stop_at, max_chords):
    """Chord steps ``ν ← ν + M⁻¹F(ν)`` with the factor of an earlier point, continued while
    each at least quarters the loss (near the root the chord iteration contracts linearly with rate
    ~ the distance at which M was built; a weaker decrease is cheaper served by a new
    Jacobian). Each costs one field evaluation and two triangular solves, against one n²d
    Jacobian build for a Newton step. Returns ``(state, loss, field)``."""

    def step(c):
        state, loss, field, count, go = c
        trial = state + jsl.cho_solve(factor, field)
        value, trial_field = fixed.loss_and_field(trial)
        keep = go & (value < loss)
        go = keep & (value <= 0.25 * loss) & (value > stop_at) & (count + 1 < max_chords)
        return (jnp.where(keep, trial, state), jnp.where(keep, value, loss),
                jnp.where(keep, trial_field, field), count + 1, go)

    state, loss, field, _, _ = jax.lax.while_loop(
        lambda c: c[4], step, (state, loss, field, jnp.array(0), active & (max_chords > 0)))
    return state, loss, field


@eqx.filter_custom_jvp
def _implicit_root(root, dynamics):
    """`root` (a root of ``dynamics.vector_field``, computed on stopped gradients), carrying the
    implicit-function derivative ``dν* = −M⁻¹ (∂F/∂θ) dθ`` (M = ∂F/∂ν at the root) of the
    dynamics' parameters θ. A custom JVP, so the forward pass pays nothing for it: no extra
    Jacobian build and solve unless something is differentiated."""
    return root


@_implicit_root.def_jvp
def _implicit_root_jvp(primals, tangents):
    root, dynamics = primals
    _, t_dynamics = tangents
    t_dynamics = jax.tree_util.tree_map(
        lambda t, p: jnp.zeros_like(p) if t is None and eqx.is_inexact_array(p) else t,
        t_dynamics, dynamics, is_leaf=lambda t: t is None)
    _, d_field = eqx.filter_jvp(lambda dyn: dyn.vector_field(jnp.zeros(()), root, None),
                                (dynamics,), (t_dynamics,))
    factor = _factor(dynamics, root)
    # A singular Jacobian (X rank-deficient, e.g. n > d: no interpolant, the loss cannot reach
    # its target) has no implicit derivative; report zero rather than a non-finite one. (The
    # mask depends on primals only, so the tangent stays linear and transposes under grad.)
    ok = jnp.all(jnp.isfinite(factor[0]))
    t_root = jsl.cho_solve(factor, d_field)  # −M⁻¹ dF, with −M = factor factorᵀ
    return root, jnp.where(ok, t_root, 0.0)


class _Equilibrium(AbstractNewtonProblem):
    """The root of a convex gradient field as a `damped_newton` problem: merit the dynamics'
    loss (``aux``: the field, computed with it by `loss_and_field`), directions from the
    Cholesky factor of ``−F'`` (`_factor`, with the Levenberg–Marquardt shift held in the memo),
    chord steps after a full Newton step (`_chords`), done at loss ``≤ aim``."""

    dynamics: AbstractConvexGradientDynamics
    table: PyTree[Array] | None
    aim: Array
    max_chords: int

    def evaluate(self, x):
        return self.dynamics.loss_and_field(x)

    def trial(self, point, direction, t):
        x = point.x + t * direction.step
        return Point(x, *self.dynamics.loss_and_field(x))

    def direction(self, point, memo):
        factor = _factor(self.dynamics, point.x, memo, self.table)
        return Direction(step=jsl.cho_solve(factor, point.aux), info=factor)

    def converged(self, point, memo):
        return point.value <= self.aim

    def refine(self, previous, point, accepted, t, direction, status):
        del status  # a failed search is retried with a shift; a non-finite direction too
        factor, shift = direction.info, previous.memo
        # Chords only where the full step was taken (the local regime: far from the root
        # chord steps slow the damped iteration down).
        x, loss, field = _chords(self.dynamics, factor, point.x, point.value, point.aux,
                                 accepted & (t == 1) & (point.value > self.aim), self.aim,
                                 self.max_chords)
        # No decrease: retry from the same point with a larger shift (a shorter step, turning
        # toward the field's direction), until the shift passes MAX_SHIFT.
        retry = jnp.maximum(shift * SHIFT_GROWTH, MIN_SHIFT)
        stuck = ~accepted & (retry > MAX_SHIFT)
        return (Point(x, loss, field), jnp.where(accepted, 0.0, retry),
                Status.where(stuck, Status.stalled, previous.status))


def newton_phase(dynamics: AbstractConvexGradientDynamics, state, *, stop_at, budget,
                 tail: EquilibriumNewton, run=True):
    """Damped Newton from ``state`` until ``loss ≤ STOP_MARGIN · stop_at``. Returns ``(state,
    iterations, result)`` with a Diffrax result: ``event_occurred`` (``loss ≤ stop_at``),
    ``dt_min_reached`` (no decrease along the Newton direction: the loss is at its round-off
    floor, read as `Status.stalled`) or ``max_steps_reached`` (iterations or budget spent).

    Each iteration builds and factorizes the Jacobian once, takes a damped Newton step, then,
    where that step was a full one (the local regime: far from the root chord steps slow the
    damped iteration down), up to ``tail.max_chords`` chord steps with the same factor
    (Shamanskii's method, `_chords`). Every trial point's loss and vector field come from one
    evaluation (`loss_and_field`). Iterations count factorizations. A chord step costs one
    field evaluation and a solve with the factor already at hand, a fraction of an iteration, and
    near the root it gains almost as much as a Newton step, so a few chord steps per
    factorization cut the iterations (and the sweep's time) on the Figure 7.1 grid."""
    fixed = _stopped(dynamics)
    aim = STOP_MARGIN * stop_at
    # The table is built once, outside the loop: under vmap over members sharing the data it
    # is unbatched, so one table serves the whole batch (XLA does not hoist such
    # size-inflating values).
    problem = _Equilibrium(dynamics=fixed, table=fixed.newton_table(), aim=aim,
                           max_chords=tail.max_chords)
    out = damped_newton(problem, jax.lax.stop_gradient(state),
                        search=Decrease(max_trials=MAX_HALVINGS + 1, overflow=OVERFLOW_SHRINK),
                        max_steps=jnp.where(run, jnp.minimum(budget, tail.max_iterations), 0),
                        memo=jnp.zeros(()), compact=True)
    root = _implicit_root(out.point.x, dynamics)
    result = dfx.RESULTS.where(out.point.value <= stop_at, dfx.RESULTS.event_occurred,
                               dfx.RESULTS.where(out.status == Status.stalled,
                                                 dfx.RESULTS.dt_min_reached,
                                                 dfx.RESULTS.max_steps_reached))
    result = dfx.RESULTS.where(run, result, dfx.RESULTS.successful)
    return root, out.steps, result
