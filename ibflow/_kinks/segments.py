"""The segment loop: ``diffeqsolve`` from switch to switch ([THEORY §8.2][theory-8-2]). The engine
(``ibflow._engine``) runs each phase of a switching dynamics through `solve_segments`."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._status import Status
from .._tail.budget import BudgetController
from .base import AbstractSwitchingDynamics
from .mode import EVENT_LOG, KinkReport
from .root_finder import IllinoisBracket

#: Default budget of switching events per solve; more ends with
#: ``Status.unresolved_switching`` (a Zeno-like sequence of switches).
DEFAULT_MAX_SWITCHES = 2000
#: The loss event is located where ``L = _STOP_AIM · stop_at``: the located state's loss carries
#: ~1e-4 relative roundoff (see the segment loop), so aiming at the level itself could return a
#: loss just above it, which the engine (converged ⇔ loss ≤ target) must not call converged.
_STOP_AIM = 0.5
#: Largest event value accepted as a located root when the root finder cannot meet its
#: tolerance.
_ROUNDOFF_EVENT = 1e-3
_EVENT_SCALE = 1e-4


class SavedStates(eqx.Module):
    """The states at the save times a segment loop has covered so far (``inf`` elsewhere)."""

    states: object  # the state's PyTree, each leaf with a leading axis of save times
    covered: Array


def _where_rows(rows, a, b):
    return jax.tree_util.tree_map(
        lambda u, v: jnp.where(rows.reshape((-1,) + (1,) * (u.ndim - 1)), u, v), a, b)


def observe_saved(saved: SavedStates, save_at, observe):
    """``observe(c, state, None)`` at every save time, ``inf`` (float leaves) where no segment
    covered it."""
    out = jax.vmap(lambda c, y: observe(c, y, None))(save_at, saved.states)
    return jax.tree_util.tree_map(
        lambda a: _where_rows(saved.covered, a, jnp.full_like(a, jnp.inf))
        if jnp.issubdtype(a.dtype, jnp.inexact) else a, out)


def empty_report(mode) -> KinkReport:
    """A report with no event yet, at `mode`."""
    return KinkReport(switches=jnp.array(0), slides=jnp.array(0), exits=jnp.array(0),
                      sliding_time=jnp.zeros(()), pattern=mode.positive, sliding=mode.sliding,
                      event_clock=jnp.full(EVENT_LOG, jnp.inf),
                      event_kind=jnp.full(EVENT_LOG, -1))


def _logged(report: KinkReport, switched, counts, t, duration, mode, old_mode) -> KinkReport:
    """`report` after one segment of `duration` ending at `t`: the counts and the log entry of
    its switch (where it `switched`), the sliding time, the mode it continues in."""
    # The log's entry: the next free one (dropped past the end, or when nothing switched).
    entry = jnp.where(switched, jnp.sum(report.event_kind >= 0), EVENT_LOG)
    kind = jnp.where(counts.exits > 0, 2, jnp.where(counts.slides > 0, 1, 0))
    return KinkReport(
        switches=report.switches + jnp.where(switched, counts.switches, 0),
        slides=report.slides + jnp.where(switched, counts.slides, 0),
        exits=report.exits + jnp.where(switched, counts.exits, 0),
        sliding_time=report.sliding_time + jnp.where(jnp.any(old_mode.sliding), duration, 0.0),
        pattern=mode.positive, sliding=mode.sliding,
        event_clock=report.event_clock.at[entry].set(t, mode="drop"),
        event_kind=report.event_kind.at[entry].set(kind, mode="drop"))


def _segment_status(sol, *, stopped, at_rest, switched, over_budget, counts, loss, too_many,
                    mode):
    """The `Status` of a segment loop after one segment: the one place it is mapped."""
    status = Status.where(stopped, Status.converged, Status.where(
        at_rest, Status.stationary, Status.solver_failed))
    status = Status.where(
        (sol.result == dfx.RESULTS.max_steps_reached) | (sol.result == dfx.RESULTS.successful)
        | (switched & over_budget), Status.budget_exhausted, status)
    stiff = sol.controller_state.stiff
    status = Status.where(sol.result == dfx.RESULTS.dt_min_reached,
                          Status.where(stiff, Status.converged, Status.stalled), status)
    status = Status.where(switched & too_many, Status.unresolved_switching, status)
    status = Status.where(switched & counts.degenerate, Status.degenerate_sliding, status)
    return Status.where(jnp.isfinite(loss), status, Status.where(
        jnp.any(mode.sliding), Status.degenerate_sliding, Status.nonfinite))


def _segment_event(dynamics, stop_at, stationarity):
    """The segment loop's event: ``components(t, y, mode)``, the values of its loss, switch and
    rest parts (each crossing 0 downwards where its event happens; rest is +inf without a
    `stationarity` reference), and the one scalar Diffrax event, their minimum."""

    def components(t, y, mode):
        # (loss, switch, rest): each crosses 0 downwards where its event happens; rest is +inf
        # without a stationarity test. The loss part is log(L / (aim·stop_at)), crossing just
        # below the stop level; −1 (an immediate event) when the loss is not finite.
        loss = dynamics.loss(y)
        stop = jnp.where(jnp.isfinite(loss), jnp.log(loss / (_STOP_AIM * stop_at)), -1.0)
        if stationarity is None:
            return stop, dynamics.event_function(t, y, mode), jnp.inf
        switch, field = dynamics.event_and_field_norm(t, y, mode)
        return stop, switch, stationarity.value(field, loss)

    def event_value(t, y, args, **kwargs):
        # One scalar event, so that a bracketing root finder applies: the min of many
        # pre-activations is only piecewise smooth, where Newton's method can fail.
        stop, switch, rest = components(t, y, args)
        return jnp.minimum(jnp.minimum(stop, switch), rest)

    def scaled_event_value(t, y, args, **kwargs):
        # The root finder stops when the bracket is below 1e-12 + 1e-14·|t| AND |value| <
        # 1e-12; scaling the value by _EVENT_SCALE turns the second test into |value| < 1e-8,
        # which roundoff allows.
        return _EVENT_SCALE * event_value(t, y, args)

    # flip=True: the value decreases through the root (no endpoint-sign check, which roundoff
    # in the interpolated state could fail). ~10 evaluations per root where bisection needs ~45
    # (and its whole 256-step budget at a loss event held above the tolerance by roundoff).
    event = dfx.Event(scaled_event_value,
                      root_finder=IllinoisBracket(rtol=1e-14, atol=1e-12, flip=True),
                      direction=False)
    return components, event


def solve_segments(
    dynamics: AbstractSwitchingDynamics, solver: dfx.AbstractAdaptiveSolver, state, t0, *,
    stop_at, rtol, atol, t_max, max_steps: int, budget=None, dt0=None,
    adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint(),
    max_switches=DEFAULT_MAX_SWITCHES, mode=None, report: KinkReport | None = None,
    save_at=None, saved=None, progress=None, watch=None, stationarity=None,
):
    """Integrate `dynamics` from ``(t0, state)`` until ``L ≤ stop_at``, switching modes at
    located events.

    Each segment is one ``diffeqsolve`` with the mode in ``args`` and one event, the first root
    of ``min(log(L/stop_at), dynamics.event_function)`` (the loss reaching `stop_at` or a
    switch), located on the dense output (`IllinoisBracket`); whichever of the two is smaller there
    decides which happened. At a switch ``dynamics.transition`` picks the next mode.
    `budget` (default `max_steps`; may be traced) bounds the attempted steps of all segments
    together, through the engine's `BudgetController`, which also ends a segment whose clock
    stalls; `max_steps` (static) sizes each ``diffeqsolve``. `mode`, `report` and `saved`
    continue an earlier call (e.g. a stiff tail phase). With `save_at` (clock values), `saved`
    records the state at each save time that a segment covers (`SavedStates`; others keep
    their value, ``inf`` at first); `observe_saved` maps them to observations after the loop.
    (Observing inside the loop would copy every observation per segment: 64 models of a
    two-layer classifier with d = 784 are 40 MB.) With a `watch`
    (`ibflow._tail.stiffness.StiffnessWatch`) a segment that turns stiff ends the loop as
    converged (the engine's explicit phase hands over to its implicit tail there). With a
    `stationarity` reference (`ibflow._dynamics.stationarity.Stationarity`) the event has a
    third component, the field's norm against its threshold: a flow that comes to rest above
    `stop_at` (a spurious minimum, a Clarke-stationary point on a kink) ends
    ``Status.stationary`` there.

    Works under ``jit`` and ``vmap`` (each member keeps its own mode and counts).

    Returns ``(state, t, steps, accepted, status, report, mode, saved, dt)``: the final state
    and clock, the attempted and accepted steps, a `Status` (converged: `stop_at` reached;
    budget_exhausted, stalled, nonfinite, solver_failed, unresolved_switching or
    degenerate_sliding), the `KinkReport`, the final mode and the step the controller last
    proposed (`dt0` of a continuation; `dt0` itself, or 0, where no step was taken).
    """
    if not isinstance(dynamics, AbstractSwitchingDynamics):
        raise ValueError("dynamics must be an AbstractSwitchingDynamics.")
    if mode is None:
        mode = dynamics.initial_mode(state)
    if report is None:
        report = empty_report(mode)
    budget = jnp.asarray(max_steps if budget is None else budget)
    t0 = jnp.asarray(t0, dtype=float)
    if save_at is not None and saved is None:
        saved = SavedStates(
            states=jax.tree_util.tree_map(
                lambda a: jnp.full(save_at.shape + a.shape, jnp.inf, a.dtype), state),
            covered=jnp.zeros(save_at.shape, dtype=bool))

    components, event = _segment_event(dynamics, stop_at, stationarity)
    # Behind a jit boundary, traced once for every stage of the solver (see
    # `ibflow._kinks.dynamics._traced_once`: the field solves the multiplier system).
    term = dfx.ODETerm(eqx.filter_jit(dynamics.vector_field))

    def segment(carry):
        state, t, mode, steps, accepted, status, done, report, saved, _ = carry
        # The first segment starts with `dt0` where given (a continuation: the step the phase
        # before proposed); a restart at a switch lets Diffrax select its first step. (Carrying
        # the step across switches saves a few steps of a sliding leaky neuron, but the mode
        # changes there: on digits, where segments are ~1 step long, a carried step is often
        # rejected where the new mode needs a smaller one, and costs more steps than it saves.)
        controller = BudgetController(dfx.PIDController(rtol=rtol, atol=atol), budget - steps,
                                      watch, jnp.where(t == t0, first_dt, 0.0))
        subs = [dfx.SubSaveAt(t1=True)]
        if save_at is not None:
            subs.append(dfx.SubSaveAt(ts=jnp.clip(save_at, t, t_max), fn=lambda c, y, args: y))
        # Under vmap the loop runs until every member is done; a member that is done already
        # takes no step (t1 = t0) instead of integrating on past its stop.
        sol = dfx.diffeqsolve(term, solver, t0=t, t1=jnp.where(done, t, t_max), dt0=None,
                              y0=state, args=mode, stepsize_controller=controller, event=event,
                              saveat=dfx.SaveAt(subs=subs, controller_state=True),
                              max_steps=max_steps, throw=False, adjoint=adjoint)
        new_state = jax.tree_util.tree_map(lambda a: a[-1], sol.ys[0])
        new_t = sol.ts[0][-1]
        if save_at is not None:
            covered = (save_at >= t) & (save_at <= new_t)
            saved = SavedStates(states=_where_rows(covered, sol.ys[1], saved.states),
                                covered=saved.covered | covered)
        steps = steps + sol.stats["num_steps"]
        accepted = accepted + sol.stats["num_accepted_steps"]
        # The root finder also asks |value| < atol at the root. The loss of an interpolated
        # state near a 1e-24 target carries roundoff of ~1e-4 relative (the residual is ~1e-12
        # of a state of size 1), so log(L/stop_at) cannot get below that; the root finder then
        # reports running out of steps with the root bracketed to the last bit: still the
        # event, with the loss within that roundoff of the target.
        # The components once (each evaluation is a copy of the multiplier system).
        stop_end, switch_end, rest_end = components(new_t, new_state, mode)
        occurred = (sol.result == dfx.RESULTS.event_occurred) | (
            (sol.result == dfx.RESULTS.nonlinear_max_steps_reached)
            & (jnp.minimum(jnp.minimum(stop_end, switch_end), rest_end) <= _ROUNDOFF_EVENT))
        stopped = occurred & (stop_end <= switch_end) & (stop_end <= rest_end)
        at_rest = occurred & ~stopped & (rest_end <= switch_end)
        switched = occurred & ~stopped & ~at_rest
        new_mode, counts = dynamics.transition(new_t, new_state, mode, rtol=rtol, atol=atol)
        mode = jax.tree_util.tree_map(lambda a, b: jnp.where(switched, a, b), new_mode, mode)
        report = _logged(report, switched, counts, new_t, new_t - t, mode, old_mode=carry[2])
        loss = dynamics.loss(new_state)
        if stationarity is not None:
            # At rest in the new mode already: its rest value starts ≤ 0 and never crosses.
            at_rest = at_rest | (switched & ~counts.degenerate & stationarity.reached(
                counts.field_norm, loss))
            switched = switched & ~at_rest
        if progress is not None:
            progress.update(loss)
        status = _segment_status(sol, stopped=stopped, at_rest=at_rest, switched=switched,
                                 over_budget=steps >= budget, counts=counts, loss=loss,
                                 too_many=report.switches >= max_switches, mode=mode)
        done = ~switched | (steps >= budget) | (report.switches >= max_switches) | (
            switched & counts.degenerate) | ~jnp.isfinite(loss)
        return (new_state, new_t, mode, steps, accepted, status, done, report, saved,
                sol.controller_state.proposed_dt)

    zero = jnp.zeros((), dtype=budget.dtype)
    first_dt = jnp.zeros_like(t0) if dt0 is None else jnp.asarray(dt0, dtype=t0.dtype)
    # Already at the stop level: no segment (the loss event, a down-crossing, would never
    # occur, and the loop would run on to the budget, far below a target that was above the
    # initial loss).
    reached = dynamics.loss(state) <= stop_at
    # A start at rest (the reference's field is that of this state: all-zero weights, a
    # saddle) never moves, and its rest value, −∞, has no down-crossing either.
    still = ~reached & (jnp.array(False) if stationarity is None else stationarity.field0 <= 0)
    init = (state, t0, mode, zero, zero, Status.where(
        reached, Status.converged, Status.where(still, Status.stationary, Status.solver_failed)),
        reached | still, report, saved, first_dt)
    # Checkpointed: reverse-mode differentiable (the event times are, so a crossing's jump in
    # the field enters the derivative). Each segment takes at least one step, so `max_steps`
    # bounds the segments.
    state, t, mode, steps, accepted, status, _, report, saved, dt = eqx.internal.while_loop(
        lambda carry: ~carry[6], segment, init, kind="checkpointed", max_steps=max_steps)
    return state, t, steps, accepted, status, report, mode, saved, dt
