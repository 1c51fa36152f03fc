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

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, Float

from .._dynamics.base import AbstractConvexGradientDynamics

#: Targets at or below this loss (relative to ``mean(y²)/2``) ask for the limit: the path point
#: where the loss crosses them is within ~sqrt(1e-16) = 1e-8 (relative) of the limit, which Newton
#: returns. A larger target is an early stop, reached on the path by the explicit phase.
LIMIT_LEVEL = 1e-16

#: Trial steps tried along one Newton direction before it counts as giving no decrease.
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


class EquilibriumNewton(eqx.Module):
    """Tail strategy for dynamics with one attracting equilibrium
    (`AbstractConvexGradientDynamics`): damped Newton on the vector field, from the state where
    the explicit phase stopped, until the loss reaches the target.

    **Arguments:** `max_iterations`: Newton iterations at most (each counts as one step of the
    solve's budget). `max_chords`: chord steps at most after each Newton step, reusing its
    factorization while each at least quarters the loss.

    Not for trajectories: the path after the switch is not computed, so ``save_at`` needs a
    Runge–Kutta tail (``stiff_solver="auto"`` picks one then).
    """

    max_iterations: int = eqx.field(static=True, default=60)
    max_chords: int = eqx.field(static=True, default=4)

    def __check_init__(self):
        for name, low in (("max_iterations", 1), ("max_chords", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"EquilibriumNewton: {name} must be an integer >= {low}; got "
                                 f"{value!r}.")


def _stopped(tree):
    return jax.tree_util.tree_map(lambda a: jax.lax.stop_gradient(a) if eqx.is_array(a) else a,
                                  tree)


def _factor(dynamics, state, shift=None, table=None):
    """Cholesky factor of ``−F'`` (symmetric positive definite: F = −const·∇D, D strictly
    convex; half the work of an LU factorization), and, with `shift`, of
    ``−F' + shift · max(diag(−F')) · I`` where the plain factor is not finite (``−F'``
    singular). `table`: the dynamics' `newton_table`. Returns ``(factor, shift used)``."""
    matrix = dynamics.newton_matrix(state, table)
    plain = jsl.cho_factor(matrix, lower=True)
    if shift is None:
        return plain, jnp.zeros(())
    bad = ~jnp.all(jnp.isfinite(plain[0]))
    used = jnp.where(bad, jnp.maximum(shift, MIN_SHIFT), shift)
    scale = jnp.max(jnp.diagonal(matrix))
    shifted = jsl.cho_factor(matrix + used * scale * jnp.eye(matrix.shape[0], dtype=matrix.dtype),
                             lower=True)
    use = used > 0
    return (jnp.where(use, shifted[0], plain[0]), plain[1]), used


def _line_search(fixed, state, loss, direction, active, max_halvings):
    """Halve the step along `direction` until the loss decreases (at most `max_halvings`
    times). Members that are not `active` (done, in a vmapped batch) take no halvings: without
    this gate a finished member at its round-off floor would make every member of its batch
    pay ``max_halvings`` loss evaluations per iteration. Returns the last trial ``(state, loss,
    field, better, halvings)`` (`field`: the vector field there, computed with the loss); the
    caller keeps it only where `better`."""

    def shorter(search):
        step, _, value, _, halvings = search
        step = jnp.where(jnp.isfinite(value), 0.5, OVERFLOW_SHRINK) * step
        trial = state + step * direction
        return (step, trial, *fixed.loss_and_field(trial), halvings + 1)

    def no_decrease(search):
        _, _, value, _, halvings = search
        return active & ~(value < loss) & (halvings < max_halvings)

    first = state + direction
    _, trial, value, field, halvings = jax.lax.while_loop(
        no_decrease, shorter, (jnp.ones(()), first, *fixed.loss_and_field(first), jnp.array(0)))
    better = active & (value < loss)
    return trial, value, field, better, halvings


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
    factor, _ = _factor(dynamics, root)
    # A singular Jacobian (X rank-deficient, e.g. n > d: no interpolant, the loss cannot reach
    # its target) has no implicit derivative; report zero rather than a non-finite one. (The
    # mask depends on primals only, so the tangent stays linear and transposes under grad.)
    ok = jnp.all(jnp.isfinite(factor[0]))
    t_root = jsl.cho_solve(factor, d_field)  # −M⁻¹ dF, with −M = factor factorᵀ
    return root, jnp.where(ok, t_root, 0.0)


class _Carry(eqx.Module):
    state: Float[Array, " n"]
    loss: Float[Array, ""]
    field: Float[Array, " n"]
    iterations: Array
    stuck: Array
    shift: Array  # the Levenberg–Marquardt shift the next iteration starts with (0: plain)


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
    evaluation (`loss_and_field`). Iterations count factorizations. Measured on the Figure 7.1
    grid (100 members, Newton from ν = 0, `ibflow.sweep` with default options, 2-core CPU):
    no chord step 4.77 iterations per member (max 8); one 3.72 (max 7); up to four, with the
    fused evaluation, 2.90 (max 6), sweep 0.315 → 0.279 s against one chord step (medians of 9
    calls, side by side)."""
    fixed = _stopped(dynamics)
    limit = jnp.minimum(budget, tail.max_iterations)
    aim = STOP_MARGIN * stop_at

    def done(carry):
        return (~run | (carry.loss <= aim) | carry.stuck | (carry.iterations >= limit)
                | ~jnp.isfinite(carry.loss))

    # Built once, outside the loop: under vmap over members sharing the data it is unbatched,
    # so one table serves the whole batch (XLA does not hoist such size-inflating values).
    table = fixed.newton_table()

    def iterate(carry):
        active = ~done(carry)
        factor, shift = _factor(fixed, carry.state, carry.shift, table)
        state, loss, field, better, halvings = _line_search(
            fixed, carry.state, carry.loss, jsl.cho_solve(factor, carry.field), active,
            MAX_HALVINGS)
        state, loss, field = (jnp.where(better, state, carry.state),
                              jnp.where(better, loss, carry.loss),
                              jnp.where(better, field, carry.field))
        state, loss, field = _chords(fixed, factor, state, loss, field,
                                     better & (halvings == 0) & (loss > aim), aim,
                                     tail.max_chords)
        # No decrease: retry from the same point with a larger shift (a shorter step, turning
        # toward the field's direction), until the shift passes MAX_SHIFT.
        retry = jnp.maximum(shift * SHIFT_GROWTH, MIN_SHIFT)
        return _Carry(state=state, loss=loss, field=field, iterations=carry.iterations + 1,
                      stuck=~better & (retry > MAX_SHIFT),
                      shift=jnp.where(better, 0.0, retry))

    start = jax.lax.stop_gradient(state)
    loss, field = fixed.loss_and_field(start)
    carry = jax.lax.while_loop(lambda c: ~done(c), iterate, _Carry(
        state=start, loss=loss, field=field, iterations=jnp.array(0), stuck=jnp.array(False),
        shift=jnp.zeros(())))
    root = _implicit_root(carry.state, dynamics)
    result = dfx.RESULTS.where(carry.loss <= stop_at, dfx.RESULTS.event_occurred,
                               dfx.RESULTS.where(carry.stuck, dfx.RESULTS.dt_min_reached,
                                                 dfx.RESULTS.max_steps_reached))
    result = dfx.RESULTS.where(run, result, dfx.RESULTS.successful)
    return root, carry.iterations, result
