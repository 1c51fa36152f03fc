"""What a flow integration returns."""

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PyTree

from ._models.base import AbstractModel


class Status(eqx.Enumeration):
    """Outcome of one integration; under ``vmap`` each member has its own."""

    converged = "the loss reached its target"
    budget_exhausted = "the step or time budget ran out before the loss reached its target"
    nonfinite = "the state or the loss became non-finite"
    solver_failed = "the ODE solver failed (step-size underflow or a failed implicit solve)"


def status_from_diffrax(result, loss) -> Status:
    """Map a Diffrax result of a loss-event-terminated solve (and the final loss) to a `Status`:
    the event means converged, running out of steps or reaching t1 means budget exhausted, a
    non-finite loss overrides everything."""
    status = Status.where(result == dfx.RESULTS.event_occurred, Status.converged,
                          Status.solver_failed)
    status = Status.where(
        (result == dfx.RESULTS.max_steps_reached) | (result == dfx.RESULTS.successful),
        Status.budget_exhausted, status)
    return Status.where(jnp.isfinite(loss), status, Status.nonfinite)


class Trajectory(eqx.Module):
    """Values saved at the requested times ``ts`` (``inf`` after the solve stopped)."""

    ts: Float[Array, " T"]
    loss: Float[Array, " T"]
    predictor: Float[Array, "T d"] | None
    invariants: PyTree[Array]


class Solution(eqx.Module):
    """The end of a flow: final model and the facts needed to trust it.

    **Fields:**
    - `model`: the model at the final time.
    - `predictor`: its end-to-end weight ``w̃`` (None for models without one).
    - `loss`: the final loss. `time`: the final time reached. `steps`: accepted solver steps.
    - `status`: a `Status` item; `converged` means the loss reached `target_loss`.
    - `target_loss`: the loss threshold that defined convergence.
    - `trajectory`: a `Trajectory` at the requested save times, or None.
    """

    model: AbstractModel
    predictor: Float[Array, " d"] | None
    loss: Float[Array, ""]
    time: Float[Array, ""]
    steps: Int[Array, ""]
    status: Status
    target_loss: Float[Array, ""]
    trajectory: Trajectory | None

    @property
    def converged(self) -> Bool[Array, ""]:
        return self.status == Status.converged
