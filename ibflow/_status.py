"""One status enumeration for every result ibflow returns (flows, minimizers, variational
solvers, descent, sweep cells), in the style of ``diffrax.RESULTS``.

Under ``vmap`` each member carries its own item, so a batch reports which members failed instead
of one failure stopping the batch. ``Status.converged`` always means *the result met its stated
criterion* (a flow: final loss ≤ target; a minimizer: the constraint and optimality hold to
tolerance); every other item says why not.
"""

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp


class Status(eqx.Enumeration):
    """Outcome of one computation; ``Status[x]`` gives the message, ``x == Status.converged``
    tests it.

    ``stationary`` is a second way for a flow to end at its limit: the flow's field fell below
    ``1e-6`` of its initial size (scaled by the loss's fall, so an interpolating flow never
    triggers it) while the loss stayed above the target; the end point is then polished by
    Newton on the gradient. It is not a failure: the limit of the flow is found, it just does
    not interpolate. ``ibflow.certify`` tells a minimum from a saddle there."""

    converged = "the result met its criterion (a flow: the loss reached its target)"
    budget_exhausted = "the step, iteration or time budget ran out before the criterion was met"
    nonfinite = "the state, the loss or the result became non-finite"
    solver_failed = "the ODE solver failed (step-size underflow or a failed implicit solve)"
    stalled = "the loss stopped decreasing before its target (the tail cannot converge)"
    line_search_failed = "the line search found no decrease (tolerance below roundoff?)"
    singular = "a linear system was singular or degenerate (e.g. X rank-deficient)"
    unresolved_switching = "activation patterns switched more often than the switch budget allows"
    degenerate_sliding = "the sliding-mode (Filippov) multiplier system was singular or infeasible"
    not_computed = "no result: the computation was not run (e.g. a sweep cell not yet done)"
    # Appended last: stored codes (sweep files) keep their meaning.
    stationary = ("the flow reached a stationary point with loss above the target (its field "
                  "vanished: a spurious minimum or a saddle; see ibflow.certify)")


#: Item names in code order (code = position), for files written without ibflow (sweep results).
STATUS_NAMES: tuple[str, ...] = tuple(Status._name_to_item)


def status_code(name: str) -> int:
    """The integer code of the item called ``name`` (its position in `STATUS_NAMES`)."""
    return STATUS_NAMES.index(name)


def status_from_diffrax(result, loss) -> Status:
    """Map a Diffrax result of a loss-event-terminated solve and its final loss to a `Status`.

    The event means converged, running out of steps or reaching t1 means budget exhausted, a
    non-finite loss overrides everything."""
    status = Status.where(result == dfx.RESULTS.event_occurred, Status.converged,
                          Status.solver_failed)
    status = Status.where(
        (result == dfx.RESULTS.max_steps_reached) | (result == dfx.RESULTS.successful),
        Status.budget_exhausted, status)
    return Status.where(jnp.isfinite(loss), status, Status.nonfinite)



def phase_status(result) -> Status:
    """A phase's status from its Diffrax(-style) result: converged when its stop event
    occurred, stalled when the step size collapsed, else as `status_from_diffrax`."""
    status = status_from_diffrax(result, jnp.zeros(()))
    return Status.where(result == dfx.RESULTS.dt_min_reached, Status.stalled, status)


__all__ = ["STATUS_NAMES", "Status", "phase_status", "status_code", "status_from_diffrax"]
