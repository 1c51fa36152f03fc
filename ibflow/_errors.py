"""`FlowError`: what ``throw=True`` raises when a result did not meet its criterion.

Outside ``jit``/``vmap`` the result is concrete, so its status is read on the host and one
Python exception is raised, carrying the result and naming the status, the loss, the target and
the option to change. Inside a trace there is no host value to read: the check stays an
``eqx.error_if`` runtime error (Equinox's message), as every ``throw`` of the Kidger stack.
"""

import equinox as eqx
import jax
import numpy as np

from ._status import STATUS_NAMES, Status

#: What to change, by status name (the option names of ``ibflow.integrate`` and friends).
ADVICE = {
    "budget_exhausted": "raise max_steps (or t_max), or raise target_loss",
    "nonfinite": "check the data and the initialization for non-finite or huge values, or "
                 "lower rtol",
    "solver_failed": "lower rtol/atol, or pass another solver / stiff_solver",
    "stalled": "raise target_loss above the loss's rounding floor, or lower rtol",
    "line_search_failed": "raise rtol (the requested tolerance may be below rounding)",
    "singular": "check the data (X rank-deficient? n > d?)",
    "unresolved_switching": "raise max_switches",
    "degenerate_sliding": "pass formulation=ibflow.ParameterSpace(kinks=False) to treat the "
                          "model as smooth",
    "not_computed": "run the computation",
    "stationary": "the limit does not interpolate: inspect it with ibflow.certify (minimum or "
                  "saddle), or change the initialization",
}


class FlowError(RuntimeError):
    """A flow (or another ibflow computation with a `Status`) did not meet its criterion and was
    called with ``throw=True`` outside ``jit``. ``error.solution`` is the result anyway (a
    `Solution`, or the computation's own result type); ``error.status`` its status name."""

    def __init__(self, message: str, solution, status: str):
        super().__init__(message)
        self.solution = solution
        self.status = status


FlowError.__module__ = "ibflow"  # its public name: tracebacks read ibflow.FlowError


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _number(x) -> str:
    return "n/a" if x is None else f"{float(np.max(np.asarray(x))):.3e}"


def check_result(result, *, what: str, traced_message: str):
    """``result`` if its status is `converged`; else raise `FlowError` (concrete result) or
    attach ``eqx.error_if`` with `traced_message` (inside a trace). `what` names the
    computation in the message (``"the flow"``). The result's ``loss`` and
    ``target_loss`` fields are quoted where it has them."""
    status = result.status
    if _is_traced(status._value):
        return eqx.error_if(result, status != Status.converged, traced_message)
    codes = np.asarray(status._value)
    if np.all(codes == int(Status.converged._value)):
        return result
    name = STATUS_NAMES[int(codes.ravel()[np.argmax(codes.ravel() != 0)])]
    loss, target = getattr(result, "loss", None), getattr(result, "target_loss", None)
    facts = ""
    if loss is not None and target is not None:
        facts = f"; loss {_number(loss)}, target_loss {_number(target)}"
    steps = getattr(result, "steps", None)
    if steps is not None:
        facts += f", after {int(np.max(np.asarray(steps)))} steps"
    raise FlowError(
        f"{what} did not converge: status {name} ({Status[getattr(Status, name)]})"
        f"{facts}. To fix: {ADVICE.get(name, 'see the status')}; or pass throw=False to get "
        "the result anyway (FlowError.solution holds it).", result, name)


__all__ = ["ADVICE", "FlowError", "check_result"]
