"""The one solve loop: ``diffeqsolve`` from event to event, for every flow ibflow integrates
([THEORY §8.2][theory-8-2]).

A run of the loop integrates from where a `Phase` stands until the loss reaches a stop level. A
segment is one ``diffeqsolve`` of the current mode's smooth field, ended by one event. A smooth
flow is the one-mode case: a single segment, ended by the boolean stop ``L ≤ stop`` (or the
field at rest). A switching dynamics (`AbstractSwitchingDynamics`) runs segment after segment:
each ends at the first root of its loss, switch or rest event, located on the dense output,
and at a switch ``dynamics.transition`` picks the next mode. A phase change of the engine
(explicit solver → implicit tail) is one more boundary: a run holds one `Leg` per phase (its
solver, stop level and stiffness watch), and where a leg reaches its level the loop continues
with the next one (its mode, kink report, saved states, step count and next step size carried
on), through the same transition between segments. The loop's one ``diffeqsolve`` steps with
a `LegSolver` (each step the segment's leg's solver), so a switching flow's program holds one
solve, one event function and one transition for both phases; each segment runs one leg for
a whole vmapped batch (`_batch_leg`). Statuses are mapped in one place (`_segment_status`).
"""

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.flatten_util
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array

from ._dynamics.stationarity import Stationarity
from ._kinks.base import AbstractSwitchingDynamics
from ._kinks.mode import KinkReport, Mode, empty_report, logged
from ._kinks.root_finder import FirstCrossing
from ._leg_solver import LastStep, LegSolver, with_controller_tolerances
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


class Leg(eqx.Module):
    """One phase of a run of the segment loop: its adaptive `solver`, the loss level `stop_at`
    that ends it and, for a phase that hands over to a stiff one, the stiffness `watch` (an
    `ibflow._tail.stiffness.StiffnessWatch`, or None), which ends it as soon as it turns stiff.
    A run's legs stop at non-increasing levels."""

    solver: dfx.AbstractAdaptiveSolver
    stop_at: Array
    watch: object = None


class Phase(eqx.Module):
    """The loop's state, and where a run of it stopped: the ODE state and clock, the steps
    taken so far in the solve (attempted and accepted), the status of the last run
    (`converged`: it reached its stop level), the saved states (`SavedStates`, or None), the
    mode and kink report (None for smooth dynamics), the step to start the next segment with
    where it carries one on (0: Diffrax selects it) and the index of the `Leg` it is in."""

    state: object
    clock: Array
    steps: Array
    accepted: Array
    status: Status
    saved: SavedStates | None
    mode: Mode | None
    report: KinkReport | None
    proposed_dt: Array
    leg: Array


class _Carry(eqx.Module):
    phase: Phase
    done: Array
    #: the next segment starts with ``phase.proposed_dt`` (a run's start, a hand-over to the
    #: next leg); after a switch Diffrax selects the first step
    carry_dt: Array


class _Segment(eqx.Module):
    """What one ``diffeqsolve`` of a segment returns: the end state and clock, its attempted
    and accepted steps, Diffrax's result, whether the stiffness watch ended it, the step it
    proposed next and the saved states so far."""

    state: object
    clock: Array
    steps: Array
    accepted: Array
    result: dfx.RESULTS
    stiff: Array
    proposed_dt: Array
    saved: SavedStates | None


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
        return dynamics.event_components(t, state, mode)[1]
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
                 proposed_dt=jnp.zeros(()) if dt0 is None else jnp.asarray(dt0, dtype=float),
                 leg=zero)


def _segment_status(seg, *, stopped, at_rest, switched, over_budget, degenerate, loss,
                    too_many, sliding):
    """The `Status` of a run after one segment (a `_Segment`): the one place it is mapped."""
    status = Status.where(stopped, Status.converged, Status.where(
        at_rest, Status.stationary, Status.solver_failed))
    status = Status.where(
        (seg.result == dfx.RESULTS.max_steps_reached) | (seg.result == dfx.RESULTS.successful)
        | (switched & over_budget), Status.budget_exhausted, status)
    status = Status.where(seg.result == dfx.RESULTS.dt_min_reached,
                          Status.where(seg.stiff, Status.converged, Status.stalled), status)
    status = Status.where(switched & too_many, Status.unresolved_switching, status)
    status = Status.where(switched & degenerate, Status.degenerate_sliding, status)
    return Status.where(jnp.isfinite(loss), status, Status.where(
        sliding, Status.degenerate_sliding, Status.nonfinite))


@eqx.filter_jit
def _vector_field(dynamics, c, state, args):
    """``dynamics.vector_field`` behind a ``jit`` boundary: traced once per input shape for
    every stage of every solver (every leg of a solve) instead of at each (a kinked field
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
def _switching_event_components(dynamics, stop_at, stationarity, t, y, mode):
    """The scaled components of `_switching_event` at `(t, y)` in `mode`, behind a ``jit``
    boundary (Diffrax traces the event function several times per solve: its shape passes,
    a segment's start, a step's end; JAX traces this once per input shape): the loss part,
    each (example, neuron) pair's switch value, and the rest part."""
    loss = dynamics.loss(y)
    switch, norm = dynamics.event_components(t, y, mode)
    rest = jnp.inf if stationarity is None else stationarity.value(norm, loss)
    # The root finder stops when the bracket is below 1e-12 + 1e-14·|t| AND |value| < 1e-12;
    # scaling the values by _EVENT_SCALE turns the second test into |value| < 1e-8, which
    # roundoff allows.
    return _EVENT_SCALE * jnp.concatenate([
        _stop_value(loss, stop_at)[None], switch, jnp.full((1,), rest, switch.dtype)])


def _switching_event(dynamics, stop_at, stationarity):
    """A switching dynamics' Diffrax event, ``(event, components)``: the event is the minimum
    of the `components` (`_switching_event_components`; each crosses 0 downwards where its
    event happens), detected at a step's end; Diffrax stops there, and `_locate` finds the
    first crossing on that step's dense output. At a segment's end `_switching_end` reads the
    same parts off the transition."""

    def components(t, y, args):
        return _switching_event_components(dynamics, stop_at, stationarity, t, y, args)

    event = dfx.Event(lambda t, y, args, **kwargs: jnp.min(components(t, y, args)),
                      root_finder=None, direction=False)
    return event, components


def _locate(components, last: LastStep, mode, end_state, happened):
    """The first crossing of the event `components` on the last step's dense output (`last`,
    a `LastStep`), where the event `happened` in it: ``(t, state, ok)``, and the step's end
    (`end_state`) where it did not. A bracketing secant on each crossing component
    (`FirstCrossing`): ~10 evaluations per root where one on their minimum took ~40, each a
    multiplier solve. The root's clock is differentiable (implicitly, through the minimum).
    """
    interpolation = last.interpolation()

    def find():
        def fn(t, _):
            # Where no event happened, the root is the step's end (as Diffrax does): a value
            # whose derivative in t is −1, not one of a state the member did not reach.
            values = jnp.where(happened, components(t, interpolation.evaluate(t), mode),
                               last.t1 - t)
            return jnp.min(values), values

        root = optx.root_find(fn, FirstCrossing(rtol=1e-14, atol=1e-12), y0=last.t1,
                              options=dict(lower=jnp.where(happened, last.t0, last.t1),
                                           upper=last.t1), has_aux=True, throw=False)
        t = jnp.where(happened, root.value, last.t1)
        state = _select(happened, interpolation.evaluate(t), end_state)
        return t, state, ~happened | (root.result == optx.RESULTS.successful)

    return jax.lax.cond(eqxi.unvmap_any(happened), find,
                        lambda: (last.t1, end_state, jnp.array(True)))


def _smooth_end(dynamics, result, state, loss, stop_at, stationarity):
    """How a one-mode segment ended (Diffrax's `result`): ``(stopped, at_rest)``."""
    occurred = result == dfx.RESULTS.event_occurred
    if stationarity is None:
        return occurred, jnp.array(False)
    at_rest = occurred & ~(loss <= stop_at) & stationarity.reached(
        field_norm(dynamics, None, state, None), loss)
    return occurred & ~at_rest, at_rest


@eqx.filter_jit
def _transition(dynamics, t, state, mode, rtol, atol):
    """``dynamics.transition`` behind a ``jit`` boundary (traced once per input shape)."""
    return dynamics.transition(t, state, mode, rtol=rtol, atol=atol)


def _switching_end(dynamics, result, t, state, loss, mode, stationarity, rtol, atol, stop_at):
    """How a segment of a switching dynamics ended (Diffrax's `result`), and the state and
    mode after it:
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
    occurred = (result == dfx.RESULTS.event_occurred) | (
        (result == dfx.RESULTS.nonlinear_max_steps_reached)
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


def _solve_leg(dynamics, solver, watch, event, p: Phase, active, first_dt, *, options, budget,
               t_max, components=None) -> _Segment:
    """One segment from `p` with `solver` (the one ``diffeqsolve``; `watch`: the stiffness
    watch or None): members where `active` is False take no step (t1 = t0) and their mode is
    inert (`Mode.live`: nothing slides, and they make no choice for a vmapped batch).
    `first_dt` > 0: the first step (else Diffrax selects it). With the event's `components`
    (a switching dynamics; `solver` a `LegSolver`), the segment ends at the first crossing
    located on the last step (`_locate`), not at that step's end."""
    save_at = options.save_at
    controller = BudgetController(dfx.PIDController(rtol=options.rtol, atol=options.atol),
                                  budget - p.steps, watch, first_dt)
    t1 = jnp.where(active, t_max, p.clock)
    subs = [dfx.SubSaveAt(t1=True)]
    if save_at is not None:  # (within [t0, t1]: Diffrax refuses save times past t1)
        subs.append(dfx.SubSaveAt(ts=jnp.clip(save_at, p.clock, t1), fn=lambda c, y, args: y))
    args = p.mode if p.mode is None else eqx.tree_at(
        lambda m: (m.sliding, m.live), p.mode, (p.mode.sliding & active, active))
    sol = dfx.diffeqsolve(dfx.ODETerm(eqx.Partial(_vector_field, dynamics)), solver,
                          t0=p.clock, t1=t1, dt0=None, y0=p.state, args=args,
                          stepsize_controller=controller, event=event,
                          saveat=dfx.SaveAt(subs=subs, controller_state=True,
                                            solver_state=components is not None),
                          max_steps=options.max_steps, throw=False, adjoint=options.adjoint)
    t, state = sol.ts[0][-1], jax.tree_util.tree_map(lambda a: a[-1], sol.ys[0])
    result = sol.result
    if components is not None:
        t, state, located = _locate(components, sol.solver_state[1], args, state,
                                    sol.result == dfx.RESULTS.event_occurred)
        result = dfx.RESULTS.where(located, result, dfx.RESULTS.nonlinear_max_steps_reached)
    saved = p.saved
    if save_at is not None:  # (those past a located event came from the step that crossed)
        covered = (save_at >= p.clock) & (save_at <= t)
        saved = SavedStates(states=_where_rows(covered, sol.ys[1], saved.states),
                            covered=saved.covered | covered)
    return _Segment(state=state, clock=t, steps=sol.stats["num_steps"],
                    accepted=sol.stats["num_accepted_steps"], result=result,
                    stiff=sol.controller_state.stiff,
                    proposed_dt=sol.controller_state.proposed_dt, saved=saved)


def _leg_watch(legs, leg):
    """The stiffness watch of a solve shared by `legs`, live in the leg that has one (at most
    one does: the explicit phase before a stiff tail)."""
    watched = [(i, one.watch) for i, one in enumerate(legs) if one.watch is not None]
    if not watched:
        return None
    if len(watched) > 1:
        raise ValueError("at most one leg of a run may watch for stiffness")
    (i, watch), = watched
    return watch.where(leg == i)


def _leg_segment(dynamics, legs, event, p: Phase, leg, active, first_dt, *, options,
                 components=None, **kwargs) -> _Segment:
    """A segment of leg `leg` (one per batch: the same for every member of a vmapped batch)
    for the members where `active` holds: with that leg's solver for a smooth flow (its legs
    run one after the other); for a switching one (the event's `components` given) with a
    `LegSolver`, so that the loop of segments holds one ``diffeqsolve`` for every leg (one
    loop, one event function, one event locator in the program) and the last step's dense
    output to locate the event on."""
    if components is None:
        return _solve_leg(dynamics, traced_once(legs[leg].solver), legs[leg].watch, event, p,
                          active, first_dt, options=options, **kwargs)
    # The legs' root finders take their tolerances from the step-size controller, which
    # Diffrax fills in only for the solver it is given.
    pid = dfx.PIDController(rtol=options.rtol, atol=options.atol)
    solver = LegSolver(solvers=tuple(with_controller_tolerances(traced_once(one.solver), pid)
                                     for one in legs), leg=leg)
    return _solve_leg(dynamics, solver, _leg_watch(legs, leg), event, p, active, first_dt,
                      options=options, components=components, **kwargs)


def _batch_leg(legs, phase: Phase, done):
    """The leg the next segment runs: the earliest leg of any member still running, reduced
    over a vmapped batch (``unvmap_max`` of its negation). Members in later legs wait: a
    batch whose members stepped in different legs at once would take both legs' steps (an
    explicit and an implicit one) at every step."""
    if len(legs) == 1:
        return 0
    return -eqxi.unvmap_max(-jnp.where(done, len(legs) - 1, phase.leg))


def _stop_of(legs, index):
    """The stop level of leg `index` (traced)."""
    stops = jnp.stack([jnp.asarray(leg.stop_at, dtype=float) for leg in legs])
    return stops[jnp.clip(index, 0, len(legs) - 1)]


def run_segments(
    dynamics, legs: tuple[Leg, ...], phase: Phase, *, options, budget, run=True, progress=None,
    stationarity: Stationarity | None = None,
) -> Phase:
    """Integrate `dynamics` from `phase` (where `run` holds) leg after leg: each `Leg`'s solver
    until the loss reaches its ``stop_at`` (or its watch finds it stiff), then the next leg's,
    switching modes at located events; returns the `Phase` where the last leg stopped (or
    where the run ended otherwise).

    `options` gives the tolerances, ``t_max``, ``save_at``, ``max_steps`` (static: sizes each
    ``diffeqsolve``), ``max_switches`` and ``adjoint``. `budget` (may be traced) bounds the
    attempted steps of the whole solve, this run's and earlier ones' (``phase.steps``), through
    the engine's `BudgetController`, which also ends a segment whose clock stalls. With a
    `stationarity` reference the flow also ends where its field comes to rest above the stop
    level (a spurious minimum, a Clarke-stationary point on a kink): ``Status.stationary``.
    Saved states (``phase.saved``) record the state at each save time a segment covers;
    `observe_saved` maps them to observations after the solve. (Observing inside the loop would
    copy every observation per segment: 64 models of a two-layer classifier with d = 784 are
    40 MB.)

    A smooth flow runs one segment per leg. A switching one runs one loop of segments for all
    its legs: a hand-over to the next leg is a segment boundary like a switch, so the compiled
    program holds one transition, not one per leg.

    Works under ``jit``, ``vmap`` (each member keeps its own leg, mode and counts) and
    reverse-mode differentiation (the loop of segments is checkpointed; the event times are
    differentiable, so a crossing's jump in the field enters the derivative).

    The status: converged (the last leg's `stop_at` reached), stationary, budget_exhausted,
    stalled, nonfinite, solver_failed, unresolved_switching or degenerate_sliding.
    """
    switching = phase.mode is not None
    t_max = jnp.where(run, options.t_max, phase.clock)
    solve = dict(options=options, budget=budget, t_max=t_max)
    last = len(legs) - 1

    def segment(carry: _Carry, only=None) -> _Carry:
        p, done = carry.phase, carry.done
        # One leg per segment for the whole batch (`only`, static, where the legs run one
        # after the other); members in another leg keep their carry.
        leg = _batch_leg(legs, p, done) if only is None else only
        active = ~done & (p.leg == leg)
        stop_at = _stop_of(legs, leg)
        event, components = (_switching_event(dynamics, stop_at, stationarity) if switching
                             else (_smooth_event(dynamics, stop_at, stationarity, progress),
                                   None))
        # A run's first segment and a leg's first start with the step proposed before; a
        # restart at a switch lets Diffrax select its first step. (Carrying the step across
        # switches saves a few steps of a sliding leaky neuron, but the mode changes there: on
        # digits, where segments are ~1 step long, a carried step is often rejected where the
        # new mode needs a smaller one, and costs more steps than it saves.)
        seg = _leg_segment(dynamics, legs, event, p, leg, active,
                           jnp.where(carry.carry_dt, p.proposed_dt, 0.0), components=components,
                           **solve)
        state, t = seg.state, seg.clock
        steps = p.steps + seg.steps
        loss = dynamics.loss(state)
        mode, report, no = p.mode, p.report, jnp.array(False)
        switched, too_many, degenerate = no, no, no
        if switching:
            stopped, at_rest, switched, new_state, new_mode, counts = _switching_end(
                dynamics, seg.result, t, state, loss, p.mode, stationarity, options.rtol,
                options.atol, stop_at)
            # A switch due where the leg stops at its loss level (the same event): the next
            # leg starts in the new mode. In the old one its event function would start at or
            # below 0 and, seeing only down-crossings, never fire again: a ReLU student whose
            # crossing coincided with the hand-over crept on the wrong slope until its budget
            # ran out.
            due = switched | (stopped & (counts.event_value <= 0) & ~counts.degenerate)
            mode = _select(due, new_mode, p.mode)
            # (Where the leg stops, its state stays the one whose loss reached the level.)
            state = _select(switched, new_state, state)
            report = logged(report, due, counts, t, t - p.clock, mode, old_mode=p.mode)
            too_many = report.switches >= options.max_switches
            degenerate = counts.degenerate
            if progress is not None:
                progress.update(loss)
        else:
            stopped, at_rest = _smooth_end(dynamics, seg.result, state, loss, stop_at,
                                           stationarity)
        status = _segment_status(seg, stopped=stopped, at_rest=at_rest, switched=switched,
                                 over_budget=steps >= budget, degenerate=degenerate, loss=loss,
                                 too_many=too_many,
                                 sliding=no if mode is None else jnp.any(mode.sliding))
        # The leg reached its level (or turned stiff) above the next leg's: hand over. (Not
        # at or below it: a leg started below its stop level sees no crossing of its loss
        # event, log(L/stop), and ran on to t_max: Solution.time 1e14 and the limit instead
        # of the path at the target.)
        hand_over = (~switched & (status == Status.converged) & (p.leg < last)
                     & (loss > _stop_of(legs, p.leg + 1)))
        new = Phase(state=state, clock=t, steps=steps, accepted=p.accepted + seg.accepted,
                    status=status, saved=seg.saved, mode=mode, report=report,
                    proposed_dt=seg.proposed_dt, leg=p.leg + hand_over.astype(p.leg.dtype))
        finished = (~switched & ~hand_over) | (steps >= budget) | too_many | (
            switched & degenerate) | ~jnp.isfinite(loss)
        return _select(active, _Carry(phase=new, done=done | finished, carry_dt=hand_over),
                       carry)

    # Already at a leg's stop level: that leg takes no segment (its loss event, a
    # down-crossing, would never occur, and the run would go on to the budget, far below a
    # target that was above the loss at its start); at the last one's, the run is done.
    loss = dynamics.loss(phase.state)
    leg = phase.leg + sum((loss <= leg.stop_at).astype(phase.leg.dtype) for leg in legs[:-1])
    reached = loss <= legs[-1].stop_at
    # A start at rest (the reference's field is that of this state: all-zero weights, a
    # saddle) never moves, and its rest value, −∞, has no down-crossing either.
    still = ~reached & (jnp.array(False) if stationarity is None else stationarity.field0 <= 0)
    status = Status.where(reached, Status.converged,
                          Status.where(still, Status.stationary, phase.status))
    carry = _Carry(phase=eqx.tree_at(lambda p: (p.status, p.leg), phase, (status, leg)),
                   done=reached | still | ~jnp.asarray(run), carry_dt=jnp.array(True))
    if not switching:  # one mode: one segment per leg (a member not in it keeps its phase)
        for i in range(len(legs)):
            carry = segment(carry, only=i)
        return carry.phase
    # Checkpointed: reverse-mode differentiable. Each segment takes at least one step, so
    # `max_steps` bounds the segments.
    out = eqx.internal.while_loop(lambda c: ~c.done, segment, carry, kind="checkpointed",
                                  max_steps=options.max_steps)
    return out.phase
