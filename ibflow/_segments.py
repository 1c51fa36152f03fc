"""The one solve loop: ``diffeqsolve`` from event to event, for every flow ibflow integrates
([THEORY §8.2][theory-8-2]).

A run of the loop integrates from where a `Phase` stands until the loss reaches a stop level. A
segment is one ``diffeqsolve`` of the current mode's smooth field, ended by one event. A smooth
flow is the one-mode case: a single segment, ended by the boolean stop ``L ≤ stop`` (or the
field at rest). A switching dynamics (`AbstractSwitchingDynamics`) runs segment after segment:
each ends at the first root of its loss, switch or rest event, located on the dense output,
and at a switch ``dynamics.transition`` picks the next mode. A phase change of the engine
(explicit solver → implicit tail) is one more boundary: the next run continues the `Phase` the
last one returned (its mode, kink report, saved states, step count and next step size) with
another solver. Statuses are mapped in one place (`_segment_status`).
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
from jaxtyping import Array

from ._dynamics.stationarity import Stationarity
from ._kinks.base import AbstractSwitchingDynamics
from ._kinks.mode import KinkReport, Mode, empty_report, logged
from ._kinks.root_finder import IllinoisBracket
from ._solver_step import traced_once
from ._status import Status
from ._tail.budget import BudgetController

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
    """The states at the save times the loop has covered so far (``inf`` elsewhere)."""

    states: object  # the state's PyTree, each leaf with a leading axis of save times
    covered: Array


class Phase(eqx.Module):
    """The loop's state, and where a run of it (a phase of a solve) stopped: the ODE state and
    clock, the steps taken so far in the solve (attempted and accepted), the status of the last
    run (`converged`: it reached its stop level), the saved states (`SavedStates`, or None), the
    mode and kink report (None for smooth dynamics) and the step to start the next run with
    (0: Diffrax selects it)."""

    state: object
    clock: Array
    steps: Array
    accepted: Array
    status: Status
    saved: SavedStates | None
    mode: Mode | None
    report: KinkReport | None
    proposed_dt: Array


class _Carry(eqx.Module):
    phase: Phase
    done: Array


def _where_rows(rows, a, b):
    return jax.tree_util.tree_map(
        lambda u, v: jnp.where(rows.reshape((-1,) + (1,) * (u.ndim - 1)), u, v), a, b)


def _select(pred, a, b):
    return jax.tree_util.tree_map(lambda u, v: jnp.where(pred, u, v), a, b)


def observe_saved(saved: SavedStates, save_at, observe):
    """``observe(c, state, None)`` at every save time, ``inf`` (float leaves) where no segment
    covered it."""
    out = jax.vmap(lambda c, y: observe(c, y, None))(save_at, saved.states)
    return jax.tree_util.tree_map(
        lambda a: _where_rows(saved.covered, a, jnp.full_like(a, jnp.inf))
        if jnp.issubdtype(a.dtype, jnp.inexact) else a, out)


def field_norm(dynamics, t, state, mode) -> Array:
    """The norm of the unit-speed field at `state` in `mode` (with a switching dynamics' sliding
    multipliers, which at a Clarke-stationary limit minimize the norm over the Clarke set:
    [THEORY §8.3][theory-8-3]): what the stationarity test compares."""
    if mode is not None:
        return dynamics.event_and_field_norm(t, state, mode)[1]
    flat, _ = jax.flatten_util.ravel_pytree(dynamics.unit_speed_field(state, None))
    return jnp.linalg.norm(flat)


def start(dynamics, save_at, dt0) -> Phase:
    """The loop's state at the initial state, clock 0 (nothing saved yet; `dt0` the first step,
    None: Diffrax selects it)."""
    state = dynamics.initial_state()
    mode = (dynamics.initial_mode(state) if isinstance(dynamics, AbstractSwitchingDynamics)
            else None)
    saved = None if save_at is None else SavedStates(
        states=jax.tree_util.tree_map(
            lambda a: jnp.full(save_at.shape + a.shape, jnp.inf, a.dtype), state),
        covered=jnp.zeros(save_at.shape, dtype=bool))
    zero = jnp.array(0)
    return Phase(state=state, clock=jnp.zeros(()), steps=zero, accepted=zero,
                 status=Status.converged, saved=saved, mode=mode,
                 report=None if mode is None else empty_report(mode),
                 proposed_dt=jnp.zeros(()) if dt0 is None else jnp.asarray(dt0, dtype=float))


def _segment_status(sol, *, stopped, at_rest, switched, over_budget, degenerate, loss, too_many,
                    sliding):
    """The `Status` of a run after one segment: the one place it is mapped."""
    status = Status.where(stopped, Status.converged, Status.where(
        at_rest, Status.stationary, Status.solver_failed))
    status = Status.where(
        (sol.result == dfx.RESULTS.max_steps_reached) | (sol.result == dfx.RESULTS.successful)
        | (switched & over_budget), Status.budget_exhausted, status)
    stiff = sol.controller_state.stiff
    status = Status.where(sol.result == dfx.RESULTS.dt_min_reached,
                          Status.where(stiff, Status.converged, Status.stalled), status)
    status = Status.where(switched & too_many, Status.unresolved_switching, status)
    status = Status.where(switched & degenerate, Status.degenerate_sliding, status)
    return Status.where(jnp.isfinite(loss), status, Status.where(
        sliding, Status.degenerate_sliding, Status.nonfinite))


@eqx.filter_jit
def _vector_field(dynamics, c, state, args):
    """``dynamics.vector_field`` behind a ``jit`` boundary: traced once per input shape for
    every stage of every solver (both phases of a solve) instead of at each (a kinked field
    solves the multiplier system: `ibflow._kinks.kinked._traced_once`)."""
    return dynamics.vector_field(c, state, args)


def _smooth_event(dynamics, stop_at, stationarity, progress):
    """The one-mode case's event: the boolean stop at a step's end, ``L ≤ stop_at``, a
    non-finite loss, or the field at rest (with a `stationarity` reference)."""

    def stop(c, y, args, **kwargs):
        value = dynamics.loss(y)
        if progress is not None:
            progress.update(value)
        hit = (value <= stop_at) | ~jnp.isfinite(value)
        if stationarity is not None:
            hit = hit | stationarity.reached(field_norm(dynamics, c, y, None), value)
        return hit

    return dfx.Event(stop)


def _stop_value(loss, stop_at):
    """The loss part of a switching dynamics' event: log(L / (aim·stop_at)), crossing just
    below the stop level; −1 (an immediate event) when the loss is not finite."""
    return jnp.where(jnp.isfinite(loss), jnp.log(loss / (_STOP_AIM * stop_at)), -1.0)


@eqx.filter_jit
def _switching_event_value(dynamics, stop_at, stationarity, t, y, mode):
    """The scaled event value of `_switching_event` at `(t, y)` in `mode`, behind a ``jit``
    boundary: Diffrax traces the event function about ten times per solve (its shape passes,
    the step's end, the root finder), JAX this once per input shape."""
    loss = dynamics.loss(y)
    stop = _stop_value(loss, stop_at)
    if stationarity is None:
        switch, rest = dynamics.event_function(t, y, mode), jnp.inf
    else:
        switch, norm = dynamics.event_and_field_norm(t, y, mode)
        rest = stationarity.value(norm, loss)
    # One scalar event, so that a bracketing root finder applies: the min of many
    # pre-activations is only piecewise smooth, where Newton's method can fail. The root
    # finder stops when the bracket is below 1e-12 + 1e-14·|t| AND |value| < 1e-12; scaling
    # the value by _EVENT_SCALE turns the second test into |value| < 1e-8, which roundoff
    # allows.
    return _EVENT_SCALE * jnp.minimum(jnp.minimum(stop, switch), rest)


def _switching_event(dynamics, stop_at, stationarity):
    """A switching dynamics' Diffrax event: one scalar, the minimum of the values of its loss,
    switch and rest parts (each crossing 0 downwards where its event happens; rest is +inf
    without a `stationarity` reference). At a segment's end `_switching_end` reads the same
    parts off the transition."""

    def scaled_event_value(t, y, args, **kwargs):
        return _switching_event_value(dynamics, stop_at, stationarity, t, y, args)

    # flip=True: the value decreases through the root (no endpoint-sign check, which roundoff
    # in the interpolated state could fail). ~10 evaluations per root where bisection needs ~45
    # (and its whole 256-step budget at a loss event held above the tolerance by roundoff).
    event = dfx.Event(scaled_event_value,
                      root_finder=IllinoisBracket(rtol=1e-14, atol=1e-12, flip=True),
                      direction=False)
    return event


def _smooth_end(dynamics, sol, state, loss, stop_at, stationarity):
    """How a one-mode segment ended: ``(stopped, at_rest)``."""
    occurred = sol.result == dfx.RESULTS.event_occurred
    if stationarity is None:
        return occurred, jnp.array(False)
    at_rest = occurred & ~(loss <= stop_at) & stationarity.reached(
        field_norm(dynamics, None, state, None), loss)
    return occurred & ~at_rest, at_rest


@eqx.filter_jit
def _transition(dynamics, t, state, mode, rtol, atol):
    """``dynamics.transition`` behind a ``jit`` boundary: both phases of a solve share its
    trace."""
    return dynamics.transition(t, state, mode, rtol=rtol, atol=atol)


def _switching_end(dynamics, sol, t, state, loss, mode, stationarity, rtol, atol, stop_at):
    """How a segment of a switching dynamics ended, and the state and mode after it:
    ``(stopped, at_rest, switched, new_state, new_mode, counts)``."""
    # The root finder also asks |value| < atol at the root. The loss of an interpolated state
    # near a 1e-24 target carries roundoff of ~1e-4 relative (the residual is ~1e-12 of a state
    # of size 1), so log(L/stop_at) cannot get below that; the root finder then reports running
    # out of steps with the root bracketed to the last bit: still the event, with the loss
    # within that roundoff of the target. The event's components at the end come with the
    # transition's own multiplier solve (each solve is a copy of the multiplier system in the
    # compiled program).
    new_state, new_mode, counts = _transition(dynamics, t, state, mode, rtol, atol)
    stop_end, switch_end = _stop_value(loss, stop_at), counts.event_value
    rest_end = jnp.inf if stationarity is None else stationarity.value(
        counts.event_field_norm, loss)
    occurred = (sol.result == dfx.RESULTS.event_occurred) | (
        (sol.result == dfx.RESULTS.nonlinear_max_steps_reached)
        & (jnp.minimum(jnp.minimum(stop_end, switch_end), rest_end) <= _ROUNDOFF_EVENT))
    # An event at which the loss is at its level ends the run, whichever component located it:
    # the loss event aims at half the level, so near it a switch (or the loss event itself,
    # ranked below a switch component at round-off) lands there first, and a run that went on
    # switched in place, one step per segment, until `max_switches`.
    stopped = occurred & (((stop_end <= switch_end) & (stop_end <= rest_end))
                          | (loss <= stop_at))
    at_rest = occurred & ~stopped & (rest_end <= switch_end)
    switched = occurred & ~stopped & ~at_rest
    if stationarity is not None:
        # At rest in the new mode already: its rest value starts ≤ 0 and never crosses.
        at_rest = at_rest | (switched & ~counts.degenerate & stationarity.reached(
            counts.field_norm, loss))
        switched = switched & ~at_rest
    return stopped, at_rest, switched, new_state, new_mode, counts


def run_segments(
    dynamics, solver: dfx.AbstractAdaptiveSolver, phase: Phase, *, stop_at, options, budget,
    run=True, progress=None, watch=None, stationarity: Stationarity | None = None,
) -> Phase:
    """Integrate `dynamics` with `solver` from `phase` (where `run` holds) until ``L ≤ stop_at``,
    switching modes at located events; returns the `Phase` where it stopped.

    `options` gives the tolerances, ``t_max``, ``save_at``, ``max_steps`` (static: sizes each
    ``diffeqsolve``), ``max_switches`` and ``adjoint``. `budget` (may be traced) bounds the
    attempted steps of the whole solve, this run's and earlier ones' (``phase.steps``), through
    the engine's `BudgetController`, which also ends a segment whose clock stalls. With a
    `watch` (`ibflow._tail.stiffness.StiffnessWatch`) a segment that turns stiff ends the run
    as converged (the engine's explicit phase hands over to its implicit tail there). With a
    `stationarity` reference the flow also ends where its field comes to rest above `stop_at`
    (a spurious minimum, a Clarke-stationary point on a kink): ``Status.stationary``. Saved
    states (``phase.saved``) record the state at each save time a segment covers;
    `observe_saved` maps them to observations after the solve. (Observing inside the loop would
    copy every observation per segment: 64 models of a two-layer classifier with d = 784 are
    40 MB.)

    Works under ``jit``, ``vmap`` (each member keeps its own mode and counts) and reverse-mode
    differentiation (the loop of segments is checkpointed; the event times are differentiable,
    so a crossing's jump in the field enters the derivative).

    The status: converged (`stop_at` reached), stationary, budget_exhausted, stalled,
    nonfinite, solver_failed, unresolved_switching or degenerate_sliding.
    """
    switching = phase.mode is not None
    save_at, rtol, atol = options.save_at, options.rtol, options.atol
    t0, first_dt = phase.clock, phase.proposed_dt
    t_max = jnp.where(run, options.t_max, t0)
    event = (_switching_event(dynamics, stop_at, stationarity) if switching
             else _smooth_event(dynamics, stop_at, stationarity, progress))
    term = dfx.ODETerm(eqx.Partial(_vector_field, dynamics))

    stepper = traced_once(solver)

    def segment(carry: _Carry) -> _Carry:
        p, done = carry.phase, carry.done
        # A run's first segment starts with the step the phase before proposed; a restart at a
        # switch lets Diffrax select its first step. (Carrying the step across switches saves a
        # few steps of a sliding leaky neuron, but the mode changes there: on digits, where
        # segments are ~1 step long, a carried step is often rejected where the new mode needs
        # a smaller one, and costs more steps than it saves.)
        controller = BudgetController(dfx.PIDController(rtol=rtol, atol=atol),
                                      budget - p.steps, watch,
                                      jnp.where(p.clock == t0, first_dt, 0.0))
        subs = [dfx.SubSaveAt(t1=True)]
        if save_at is not None:
            subs.append(dfx.SubSaveAt(ts=jnp.clip(save_at, p.clock, t_max),
                                      fn=lambda c, y, args: y))
        # Under vmap the loop runs until every member is done; a member that is done already
        # takes no step (t1 = t0) instead of integrating on past its stop, and its mode is
        # inert (`Mode.live`): nothing slides, and it makes no choice for the batch.
        args = p.mode if not switching else eqx.tree_at(
            lambda m: (m.sliding, m.live), p.mode, (p.mode.sliding & ~done, ~done))
        sol = dfx.diffeqsolve(term, stepper, t0=p.clock, t1=jnp.where(done, p.clock, t_max),
                              dt0=None, y0=p.state, args=args, stepsize_controller=controller,
                              event=event, saveat=dfx.SaveAt(subs=subs, controller_state=True),
                              max_steps=options.max_steps, throw=False, adjoint=options.adjoint)
        state = jax.tree_util.tree_map(lambda a: a[-1], sol.ys[0])
        t = sol.ts[0][-1]
        saved = p.saved
        if save_at is not None:
            covered = (save_at >= p.clock) & (save_at <= t)
            saved = SavedStates(states=_where_rows(covered, sol.ys[1], saved.states),
                                covered=saved.covered | covered)
        steps = p.steps + sol.stats["num_steps"]
        loss = dynamics.loss(state)
        mode, report, no = p.mode, p.report, jnp.array(False)
        switched, too_many, degenerate = no, no, no
        if switching:
            stopped, at_rest, switched, new_state, new_mode, counts = _switching_end(
                dynamics, sol, t, state, loss, p.mode, stationarity, rtol, atol, stop_at)
            # A switch due where the run stops at its loss level (the same event): the next
            # phase (the explicit phase hands over to its tail there) starts in the new mode.
            # In the old one its event function would start at or below 0 and, seeing only
            # down-crossings, never fire again: a ReLU student whose crossing coincided with
            # the hand-over crept on the wrong slope until its budget ran out.
            due = switched | (stopped & (counts.event_value <= 0) & ~counts.degenerate)
            mode = _select(due, new_mode, p.mode)
            # (Where the run stops, its state stays the one whose loss reached the level.)
            state = _select(switched, new_state, state)
            report = logged(report, due, counts, t, t - p.clock, mode, old_mode=p.mode)
            too_many = report.switches >= options.max_switches
            degenerate = counts.degenerate
            if progress is not None:
                progress.update(loss)
        else:
            stopped, at_rest = _smooth_end(dynamics, sol, state, loss, stop_at, stationarity)
        status = _segment_status(sol, stopped=stopped, at_rest=at_rest, switched=switched,
                                 over_budget=steps >= budget, degenerate=degenerate, loss=loss,
                                 too_many=too_many,
                                 sliding=no if mode is None else jnp.any(mode.sliding))
        new = Phase(state=state, clock=t, steps=steps,
                    accepted=p.accepted + sol.stats["num_accepted_steps"], status=status,
                    saved=saved, mode=mode, report=report,
                    proposed_dt=sol.controller_state.proposed_dt)
        finished = ~switched | (steps >= budget) | too_many | (switched & degenerate) | (
            ~jnp.isfinite(loss))
        return _Carry(phase=new, done=done | finished)

    # Already at the stop level: no segment (the loss event, a down-crossing, would never
    # occur, and the run would go on to the budget, far below a target that was above the
    # loss at its start).
    reached = dynamics.loss(phase.state) <= stop_at
    # A start at rest (the reference's field is that of this state: all-zero weights, a
    # saddle) never moves, and its rest value, −∞, has no down-crossing either.
    still = ~reached & (jnp.array(False) if stationarity is None else stationarity.field0 <= 0)
    status = Status.where(reached, Status.converged,
                          Status.where(still, Status.stationary, phase.status))
    init = _Carry(phase=eqx.tree_at(lambda p: p.status, phase, status),
                  done=reached | still | ~jnp.asarray(run))
    if not switching:  # one mode: one segment (a member done on entry keeps its phase)
        return _select(init.done, init.phase, segment(init).phase)
    # Checkpointed: reverse-mode differentiable. Each segment takes at least one step, so
    # `max_steps` bounds the segments.
    out = eqx.internal.while_loop(lambda c: ~c.done, segment, init, kind="checkpointed",
                                  max_steps=options.max_steps)
    return out.phase
