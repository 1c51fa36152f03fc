"""The segment loop: ``diffeqsolve`` from switch to switch (THEORY §8.2)."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from .._status import Status
from .base import AbstractSwitchingDynamics
from .mode import KinkReport

#: Default budget of switching events per solve; more ends with
#: ``Status.unresolved_switching`` (a Zeno-like sequence of switches).
DEFAULT_MAX_SWITCHES = 2000
#: Largest event value accepted as a located root when bisection cannot meet its tolerance.
_ROUNDOFF_EVENT = 1e-3
_EVENT_SCALE = 1e-4


def solve_segments(
    dynamics: AbstractSwitchingDynamics, solver: dfx.AbstractAdaptiveSolver, state, t0, *,
    stop_at, rtol, atol, t_max, max_steps: int, dt0=None,
    adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint(),
    max_switches: int = DEFAULT_MAX_SWITCHES, mode=None, report: KinkReport | None = None,
):
    """Integrate `dynamics` from ``(t0, state)`` until ``L ≤ stop_at``, switching modes at
    located events.

    Each segment is one ``diffeqsolve`` with the mode in ``args`` and one event, the first root
    of ``min(log(L/stop_at), dynamics.event_function)`` (the loss reaching `stop_at` or a
    switch), located by bisection on the dense output; whichever of the two is smaller there
    decides which happened. At a
    switch ``dynamics.transition`` picks the next mode. `max_steps` (static) bounds the
    accepted steps of all segments together: the loop stops once they reach it (the last
    segment may overrun by at most its own steps). `mode` and `report` continue an earlier
    call (e.g. a stiff tail phase).

    Works under ``jit`` and ``vmap`` (each member keeps its own mode and counts).

    Returns ``(state, t, steps, status, report, mode)``: the final state and time, the
    accepted steps, a `Status` (converged, budget_exhausted, nonfinite, solver_failed,
    unresolved_switching or degenerate_sliding) and a `KinkReport`.
    """
    if not isinstance(dynamics, AbstractSwitchingDynamics):
        raise ValueError("dynamics must be an AbstractSwitchingDynamics.")
    if mode is None:
        mode = dynamics.initial_mode(state)
    if report is None:
        report = KinkReport(switches=jnp.array(0), slides=jnp.array(0), exits=jnp.array(0),
                            sliding_time=jnp.zeros(()), pattern=mode.positive,
                            sliding=mode.sliding)

    def stop_value(y):
        # log(L / stop_at): crosses 0 downwards when the loss reaches its target; −1 (an
        # immediate event) when the loss is not finite.
        value = dynamics.loss(y)
        return jnp.where(jnp.isfinite(value), jnp.log(value / stop_at), -1.0)

    def event_value(t, y, args, **kwargs):
        # One scalar event, so that a bracketing root finder applies: the min of many
        # pre-activations is only piecewise smooth, where Newton's method can fail.
        return jnp.minimum(stop_value(y), dynamics.event_function(t, y, args))

    def scaled_event_value(t, y, args, **kwargs):
        # Bisection stops when the bracket is below 1e-12 + 1e-14·|t| AND |value| < 1e-12;
        # scaling the value by _EVENT_SCALE turns the second test into |value| < 1e-8, which
        # roundoff allows, so a root costs ~45 bisections instead of the 256-step maximum.
        return _EVENT_SCALE * event_value(t, y, args)

    # flip=True: the value decreases through the root (no endpoint-sign check, which roundoff
    # in the interpolated state could fail).
    event = dfx.Event(scaled_event_value,
                      root_finder=optx.Bisection(rtol=1e-14, atol=1e-12, flip=True),
                      direction=False)
    term = dfx.ODETerm(dynamics.vector_field)
    controller = dfx.PIDController(rtol=rtol, atol=atol)

    def segment(carry):
        state, t, mode, steps, status, done, report = carry
        sol = dfx.diffeqsolve(term, solver, t0=t, t1=t_max, dt0=dt0, y0=state, args=mode,
                              stepsize_controller=controller, event=event,
                              saveat=dfx.SaveAt(t1=True), max_steps=max_steps, throw=False,
                              adjoint=adjoint)
        new_state = jax.tree_util.tree_map(lambda a: a[-1], sol.ys)
        new_t = sol.ts[-1]
        steps = steps + sol.stats["num_accepted_steps"]
        # Bisection also asks |value| < atol at the root. The loss of an interpolated state
        # near a 1e-24 target carries roundoff of ~1e-4 relative (the residual is ~1e-12 of a
        # state of size 1), so log(L/stop_at) cannot get below that; the root finder then
        # reports running out of steps with the root bracketed to the last bit: still the
        # event, with the loss within that roundoff of the target.
        occurred = (sol.result == dfx.RESULTS.event_occurred) | (
            (sol.result == dfx.RESULTS.nonlinear_max_steps_reached)
            & (event_value(new_t, new_state, mode) <= _ROUNDOFF_EVENT))
        stopped = occurred & (stop_value(new_state) <= dynamics.event_function(
            new_t, new_state, mode))
        switched = occurred & ~stopped
        new_mode, counts = dynamics.transition(new_t, new_state, mode)
        sliding_time = report.sliding_time + jnp.where(jnp.any(mode.sliding), new_t - t, 0.0)
        mode = jax.tree_util.tree_map(lambda a, b: jnp.where(switched, a, b), new_mode, mode)
        report = KinkReport(
            switches=report.switches + jnp.where(switched, counts.switches, 0),
            slides=report.slides + jnp.where(switched, counts.slides, 0),
            exits=report.exits + jnp.where(switched, counts.exits, 0),
            sliding_time=sliding_time, pattern=mode.positive, sliding=mode.sliding)
        loss = dynamics.loss(new_state)
        status = Status.where(stopped, Status.converged, Status.solver_failed)
        status = Status.where(
            (sol.result == dfx.RESULTS.max_steps_reached) | (sol.result == dfx.RESULTS.successful)
            | (switched & (steps >= max_steps)), Status.budget_exhausted, status)
        status = Status.where(switched & (report.switches >= max_switches),
                              Status.unresolved_switching, status)
        status = Status.where(switched & counts.degenerate, Status.degenerate_sliding, status)
        status = Status.where(jnp.isfinite(loss), status, Status.where(
            jnp.any(mode.sliding), Status.degenerate_sliding, Status.nonfinite))
        done = ~switched | (steps >= max_steps) | (report.switches >= max_switches) | (
            switched & counts.degenerate) | ~jnp.isfinite(loss)
        return new_state, new_t, mode, steps, status, done, report

    init = (state, jnp.asarray(t0, dtype=float), mode, jnp.array(0), Status.solver_failed,
            jnp.array(False), report)
    state, t, mode, steps, status, _, report = eqx.internal.while_loop(
        lambda carry: ~carry[5], segment, init, kind="lax")
    return state, t, steps, status, report, mode
