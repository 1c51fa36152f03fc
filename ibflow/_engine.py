"""The one engine: every ODE ibflow solves (regression, mirror and warped flows, classification
clocks, sweep members, solve-route gradients) goes through `solve`, and every step of it through
the one segment loop (`ibflow._segments.run_segments`, the one ``diffeqsolve``).

A solve runs up to two phases of that loop: the explicit solver, stopped by the event
``loss ≤ stop`` (never at a guessed horizon) where the loss falls below
``stiff_switch · loss_scale``, then the tail to the target ([THEORY §8.1][theory-8-1]): Newton to
the equilibrium for dynamics that have one attracting equilibrium (`EquilibriumNewton`), else the
loop continued with an implicit Runge–Kutta method whose stage equations use the dynamics'
structured Jacobian (`StructuredChord`): dense closed form for reductions, low rank by Woodbury
in parameter space, so no p × p matrix is formed. The two phases are the loop's two legs
(`ibflow._segments.Leg`). A smooth flow is the loop's one-mode case (one segment per leg);
switching dynamics (piecewise-linear models, [THEORY §8.2][theory-8-2]) run segment by segment,
switch to switch, in one loop for both legs: the phase change is one more segment boundary (the
tail continues the explicit phase's mode, kink report, saved states and step size), and the
compiled program holds one ``diffeqsolve`` (`ibflow._leg_solver.LegSolver`), one event function
and one transition. One step budget (`max_steps`) covers both phases; a stalled clock ends a
phase early.

A flow need not interpolate ([THEORY §8.3][theory-8-3]): in parameter space the explicit phase
also ends where the flow's field vanishes with the loss above its level (`Stationarity`), and so
does, through kinks, the tail (the segment loop locates the rest as one more event); the status
is `Status.stationary`, and Newton on the gradient polishes an end point that rests on no kink to
round-off.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from . import _programs as programs
from ._dynamics.base import AbstractDynamics, AbstractStationaryEndDynamics
from ._dynamics.stationarity import Stationarity
from ._errors import check_result
from ._progress import LossProgress
from ._segments import DEFAULT_MAX_SWITCHES, Leg, field_norm, observe_saved, run_segments, start
from ._solution import Solution, Trajectory, observation, with_predictor
from ._status import Status
from ._tail.base import AbstractTail
from ._tail.chord import StructuredChord, linearization, with_structured_chord
from ._tail.stiffness import STIFF_CEILING, StiffnessWatch


class SolveOptions(eqx.Module):
    """Validated options of one solve (see `ibflow.integrate` for their meaning). Floats are
    array leaves (traced: sweeping them never recompiles); the rest is static."""

    rtol: Float[Array, ""]
    atol: Float[Array, ""]
    target_loss: Float[Array, ""]
    stiff_switch: Float[Array, ""]
    loss_scale: Float[Array, ""]
    t_max: Float[Array, ""]
    dt0: Float[Array, ""] | None
    save_at: Float[Array, " T"] | None
    solver: dfx.AbstractAdaptiveSolver
    stiff_solver: AbstractTail | None
    adjoint: dfx.AbstractAdjoint
    max_steps: int = eqx.field(static=True)
    throw: bool = eqx.field(static=True)
    progress: bool = eqx.field(static=True)
    max_switches: Int[Array, ""] | int = DEFAULT_MAX_SWITCHES
    #: also switch to the tail as soon as the explicit phase turns stiff (`StiffnessWatch`)
    watch_stiffness: bool = eqx.field(static=True, default=False)


#: Newton iterations at most that polish a stationary end point (each one step of the budget).
STATIONARY_NEWTON_ITERATIONS = 30
#: Up to this many state entries Newton uses the dense Hessian (``jax.hessian`` and an
#: eigendecomposition: a pseudo-inverse, so flat directions are left alone); above it GMRES on
#: Hessian–vector products (one JVP of the gradient each), no p × p matrix.
DENSE_HESSIAN_MAX = 2000
#: Newton's total displacement may be at most this fraction of the distance the flow travelled:
#: a larger one would leave the flow's basin (another critical point), and the polish is refused.
STATIONARY_MAX_JUMP = 0.1
#: Newton steps in a row that do not shrink the gradient before the polish stops.
STATIONARY_MISSES = 3


def _stationarity(dynamics, phase):
    """The stationarity reference for dynamics that can end at a non-interpolating stationary
    point (`AbstractStationaryEndDynamics`: parameter-space flows, smooth or through kinks), at
    the start `phase`, else None. Reductions are gradient flows of convex functions (or
    classifiers with vanishing loss) and keep the one stop of their loss event."""
    if not isinstance(dynamics, AbstractStationaryEndDynamics):
        return None
    return Stationarity(field0=field_norm(dynamics, phase.clock, phase.state, phase.mode),
                        loss0=dynamics.loss(phase.state))


def _with_structured_root_finder(solver, dynamics, state, mode):
    """The tail solver with its root finder replaced by `StructuredChord` when the solver is an
    implicit Runge–Kutta method (it has a ``root_finder``) and the dynamics has a structure
    (its linearization's shapes at `state` in `mode`, where the tail starts).

    The chord keeps the replaced `diffrax.VeryChord`'s ``rtol``, ``atol``, ``norm`` and
    ``kappa``. For Diffrax's default root finders these are the "taken from the step-size
    controller" sentinels, which ``diffeqsolve`` resolves to the controller's values, RMS norm
    included. (A chord with its own max norm at the controller's tolerances misjudges its
    convergence at tight tolerances, rejects most tail steps as nonlinear divergence and ran
    out of steps at rtol = 1e-12: the 1e-5-scale diagonal net of tests/test_differentiable.py.)"""
    root_finder = getattr(solver, "root_finder", None)
    if not isinstance(root_finder, dfx.VeryChord):
        return solver
    # (Through the chord's own jit boundary, at the phase's mode: the chord's first real
    # linearization then reuses this trace.)
    structure = jax.eval_shape(lambda: linearization(dynamics, jnp.zeros(()), state, mode))
    if structure is None:  # no structure offered: Diffrax differentiates the stage function
        return solver
    chord = StructuredChord(dynamics=dynamics, rtol=root_finder.rtol, atol=root_finder.atol,
                            norm=root_finder.norm, kappa=root_finder.kappa, structure=structure)
    return with_structured_chord(solver, chord)


def _observe(dynamics):
    def observe(c, state, args):
        model = dynamics.model(state)
        return dynamics.time(c, state), dynamics.loss(state), model, *observation(model)

    return observe


def _newton_direction(loss, state, grad):
    """The Newton step ``−H⁺∇L`` at ``state`` (H the loss's Hessian in the state): the dense
    pseudo-inverse (eigenvalues below 1e-10 of the largest are treated as 0: the flat
    directions of rescaling symmetries, and a time-warped flow's time entry) up to
    `DENSE_HESSIAN_MAX` entries, else GMRES on Hessian–vector products."""
    if state.shape[0] <= DENSE_HESSIAN_MAX:
        values, vectors = jnp.linalg.eigh(jax.hessian(loss)(state))
        cut = 1e-10 * jnp.max(jnp.abs(values))
        inverse = jnp.where(jnp.abs(values) > cut, 1.0 / jnp.where(values == 0, 1.0, values),
                            0.0)
        return -vectors @ (inverse * (vectors.T @ grad))
    _, hvp = jax.linearize(jax.grad(loss), state)
    step, _ = jax.scipy.sparse.linalg.gmres(hvp, grad, tol=1e-14, restart=50, maxiter=4)
    return -step


def _stationary_newton(dynamics, state, start, run, budget, loss_scale):
    """Polish a stationary end point: Newton on ``∇L = 0`` from the flow's `state`, where `run`
    ([THEORY §8.3][theory-8-3]). Near a critical point the flow's field is ``−H(θ − θ*)``, so
    Newton, started in its basin, converges quadratically to the flow's own limit. Each step
    must not raise the loss (beyond round-off: the flow only descends to its limit) and must
    keep the total displacement within `STATIONARY_MAX_JUMP` of the distance travelled from
    `start` (else Newton heads for another critical point and stops). Round-off in the loss:
    residuals r = f − y computed from outputs of size ~``sqrt(loss_scale)`` carry errors
    ~``eps·sqrt(loss_scale)``, so L = mean(r²)/2 is known to ~``eps·sqrt(L·loss_scale)``.
    The iterate with the smallest gradient is returned; the loop ends after
    `STATIONARY_MISSES` steps in a row that do not improve it (the round-off floor). Runs on
    stopped values; derivatives pass through as those of the flow's end point. Returns
    ``(state, iterations)``."""
    loss = dynamics.loss
    x = jax.lax.stop_gradient(state)
    reach = STATIONARY_MAX_JUMP * jnp.linalg.norm(x - jax.lax.stop_gradient(start))
    limit = jnp.minimum(budget, STATIONARY_NEWTON_ITERATIONS)
    eps = jnp.finfo(x.dtype).eps

    def body(c):
        y, value, grad, best, best_norm, count, misses, _ = c
        trial = y + _newton_direction(loss, y, grad)
        trial_value, trial_grad = jax.value_and_grad(loss)(trial)
        trial_norm = jnp.linalg.norm(trial_grad)
        slack = 64 * eps * (jnp.abs(value) + jnp.sqrt(jnp.abs(value) * loss_scale))
        ok = (jnp.isfinite(trial_value) & (trial_value <= value + slack)
              & (jnp.linalg.norm(trial - x) <= reach))
        better = ok & (trial_norm < best_norm)
        misses = jnp.where(better, 0, misses + 1)
        go = ok & (misses < STATIONARY_MISSES) & (count + 1 < limit)
        return (jnp.where(ok, trial, y), jnp.where(ok, trial_value, value),
                jnp.where(ok, trial_grad, grad), jnp.where(better, trial, best),
                jnp.where(better, trial_norm, best_norm), count + 1, misses, go)

    value, grad = jax.value_and_grad(loss)(x)
    zero = jnp.zeros((), jnp.asarray(budget).dtype)
    _, _, _, best, _, count, _, _ = jax.lax.while_loop(
        lambda c: c[-1], body,
        (x, value, grad, x, jnp.linalg.norm(grad), zero, zero,
         run & (limit > 0) & jnp.any(grad != 0)))
    return state + jax.lax.stop_gradient(best - x), count


def _finish(dynamics, tail, first, *, budget, options, progress):
    """The last phase from where the segment loop stopped, run by a tail that finishes the
    flow itself (`AbstractTail.run`: Newton to the equilibrium). It runs only where the loop
    stopped at its level and above the target: a target at or above the switch level is the
    loop's own stop."""
    run = (first.status == Status.converged) & (
        dynamics.loss(first.state) > options.target_loss)
    return tail.run(dynamics, first, run=run, stop_at=options.target_loss,
                    budget=budget - first.steps, progress=progress)


def _legs(dynamics, options, begin, first_stop, watch):
    """The segment loop's legs: the explicit solver down to `first_stop` (with the stiffness
    `watch`), then, where the tail continues the loop (`AbstractTail.segment_solver`: an
    implicit Runge–Kutta method), that solver with the structured root finder down to the
    target. The tail starts with the step the explicit phase would have taken next
    (stability-limited there, so small for an implicit method, which grows it; Diffrax's own
    selection costs two field evaluations and started smaller still)."""
    legs = (Leg(solver=options.solver, stop_at=first_stop, watch=watch),)
    tail = options.stiff_solver
    solver = None if tail is None else tail.segment_solver()
    if solver is not None:
        legs += (Leg(solver=_with_structured_root_finder(solver, dynamics, begin.state,
                                                         begin.mode),
                     stop_at=options.target_loss),)
    return legs


def _status(status, final_loss, target_loss):
    """The status from the deciding phase's status and the *returned model's* loss:
    converged if and only if that loss is ≤ the target."""
    status = Status.where(jnp.isfinite(final_loss), status, Status.nonfinite)
    reached = jnp.isfinite(final_loss) & (final_loss <= target_loss)
    not_reached = Status.where(status == Status.converged, Status.budget_exhausted, status)
    return Status.where(reached, Status.converged, not_reached)


@eqx.debug.assert_max_traces(max_traces=None)  # counted by tests: one trace per configuration
def traced_solve(dynamics: AbstractDynamics, options: SolveOptions) -> Solution:
    """`solve`'s body, traced once per configuration (the static skeleton of its arguments)."""
    progress = LossProgress.start(dynamics.loss(dynamics.initial_state()),
                                  options.target_loss) if options.progress else None
    tail = options.stiff_solver
    first_stop = options.target_loss if tail is None else tail.first_stop(
        options.target_loss, jnp.maximum(options.target_loss,
                                         options.stiff_switch * options.loss_scale),
        options.loss_scale)
    budget = jnp.asarray(options.max_steps)
    watch = None
    if options.watch_stiffness and tail is not None and tail.watches_stiffness:
        watch = StiffnessWatch(loss=dynamics.loss, ceiling=STIFF_CEILING * options.loss_scale)
    begin = start(dynamics, options.save_at, options.dt0)
    stationarity = _stationarity(dynamics, begin)
    phase = run_segments(dynamics, _legs(dynamics, options, begin, first_stop, watch), begin,
                         options=options, budget=budget, progress=progress,
                         stationarity=stationarity)
    status = phase.status
    if tail is not None and tail.segment_solver() is None:
        first = phase
        phase = _finish(dynamics, tail, first, budget=budget, options=options,
                        progress=progress)
        # A first phase that failed, stalled or ran out of budget decides the outcome.
        status = Status.where(first.status == Status.converged, phase.status, first.status)
    steps, accepted = phase.steps, phase.accepted
    if stationarity is not None:
        # The limit of a flow that stops at a stationary point lies at t = ∞ (as Newton's).
        polish = status == Status.stationary
        if phase.mode is not None:
            # Newton on the loss is Newton in one smooth piece: not where a pair slides on its
            # kink (a Clarke-stationary point), whose end point is the located one.
            polish = polish & ~jnp.any(phase.mode.sliding)
        state, iterations = _stationary_newton(dynamics, phase.state, begin.state, polish,
                                               budget - steps, options.loss_scale)
        steps, accepted = steps + iterations, accepted + iterations
        phase = eqx.tree_at(lambda p: (p.state, p.clock), phase,
                            (state, jnp.where(polish & (iterations > 0), jnp.inf, phase.clock)))
    if progress is not None:
        progress.close(steps)  # the bar ends on the step count `Solution.steps` reports
    model = dynamics.model(phase.state)
    loss = dynamics.data_loss(model)
    trajectory = None
    if options.save_at is not None:
        time_t, loss_t, models_t, predictor_t, invariants_t = observe_saved(
            phase.saved, options.save_at, _observe(dynamics))
        trajectory = Trajectory(ts=options.save_at, time=time_t, loss=loss_t, models=models_t,
                                predictor=predictor_t, invariants=invariants_t)
    time = jnp.where(jnp.isinf(phase.clock), jnp.inf, dynamics.time(phase.clock, phase.state))
    out = Solution(model=model, loss=loss, time=time,
                   clock=phase.clock, steps=steps, accepted_steps=accepted,
                   status=_status(status, loss, options.target_loss),
                   target_loss=options.target_loss, trajectory=trajectory,
                   kinks=phase.report)
    return with_predictor(out)  # `throw` is checked by `solve`, outside the compiled program


# --- dispatch ------------------------------------------------------------------------------
# `solve` is `traced_solve` under `jax.jit`, with the arguments' and the result's non-array
# leaves held static, as `eqx.filter_jit` does. Written out because filter_jit's own partition
# of the arguments and recombination of the result (module by module) cost ~0.15 ms per call,
# a twentieth of a small kinked solve (the sliding leaky neurons of benchmarks/kinks.py: ~3.5
# ms at rtol 1e-6); a flatten and an unflatten cost a few µs.

_ARRAY = object()  # the place of an array leaf in a skeleton


class _Skeleton:
    """The static part of a PyTree: its structure and its non-array leaves (`_ARRAY` where an
    array goes). Hashable: the key of `_compiled`'s cache."""

    __slots__ = ("treedef", "leaves", "_hash")
    ARRAY = _ARRAY

    def __init__(self, tree):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree)
        self.leaves = tuple(_ARRAY if eqx.is_array(leaf) else leaf for leaf in leaves)
        self._hash = hash((self.treedef, self.leaves))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (isinstance(other, _Skeleton) and self.treedef == other.treedef
                and self.leaves == other.leaves)

    @classmethod
    def of_parts(cls, treedef, leaves):
        skeleton = cls.__new__(cls)
        skeleton.treedef, skeleton.leaves = treedef, tuple(leaves)
        skeleton._hash = hash((treedef, skeleton.leaves))
        return skeleton

    def fill(self, arrays):
        it = iter(arrays)
        return jax.tree_util.tree_unflatten(
            self.treedef, [next(it) if leaf is _ARRAY else leaf for leaf in self.leaves])


def _arrays(tree):
    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if eqx.is_array(leaf)]


#: The result's skeleton for each argument skeleton, recorded when `_compiled` traces it.
_RESULTS: dict = {}


def _solve_arrays(arrays, skeleton):
    out = traced_solve(*skeleton.fill(arrays))
    _RESULTS[skeleton] = _Skeleton(out)
    return _arrays(out)


# Named "solve": the compiled module is "jit_solve", in the persistent compilation cache too.
_solve_arrays.__name__ = _solve_arrays.__qualname__ = "solve"
_compiled = jax.jit(_solve_arrays, static_argnums=1)


def solve(dynamics: AbstractDynamics, options: SolveOptions) -> Solution:
    """Integrate `dynamics` from its initial state until its loss reaches
    ``options.target_loss``; returns the one `Solution` type. Compiled once per configuration
    (every array leaf of the arguments is traced); works under ``jit``, ``vmap`` and
    ``grad``."""
    args = (dynamics, options)
    # Read from a program an earlier process traced where one is stored (`ibflow._programs`).
    arrays, result = programs.run(_compiled, _arrays(args), _Skeleton(args), _RESULTS)
    out = result.fill(arrays)
    if options.throw:
        # Concrete result: one `FlowError` naming the status; inside a trace: eqx.error_if.
        out = check_result(out, what="the flow", traced_message=(
            "the flow did not converge (see Solution.status; pass throw=False to get the "
            "Solution anyway)."))
    return out
