"""What a flow integration returns: one `Solution` type for every flow ibflow integrates."""

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float, Int, PyTree

from ._models.base import AbstractInvariantModel, AbstractPredictorModel
from ._result import AbstractResult
from ._status import Status


class Trajectory(eqx.Module):
    """The flow at the requested clock values ``ts`` (entries after the solve stopped hold
    ``inf``).

    **Fields:** `ts` (T,) the clock values (real time for unwarped flows); `time` (T,) the real
    gradient-flow time there; `loss` (T,); `models` the model at each point, batched along a
    leading T axis; `predictor` (T, d) and `invariants` where the model offers them (else None).
    """

    ts: Float[Array, " T"]
    time: Float[Array, " T"]
    loss: Float[Array, " T"]
    models: eqx.Module
    predictor: Float[Array, "T d"] | None = None
    invariants: PyTree[Array] | None = None

    @property
    def valid(self) -> Bool[Array, " T"]:
        """Points the solve reached (later save times hold ``inf``)."""
        return jax.numpy.isfinite(self.loss)


class Solution(AbstractResult):
    """The end of a flow: final model and the facts needed to trust it.

    **Fields:**
    - `model`: the model at the end. `predictor`: its end-to-end weight ``w̃`` where the model
      offers one (`AbstractPredictorModel`), else None.
    - `loss`: the loss of the returned `model` on the data (recomputed from it, so the status can
      never contradict the model). `status`: a `Status`; `converged` if and only if
      ``loss ≤ target_loss``. `target_loss`: the threshold.
    - `time`: the real gradient-flow time reached; `clock`: the integration variable reached
      (equal to `time` unless the flow is time-warped, e.g. `LossClock`). Where a Newton tail
      (`EquilibriumNewton`) ran, the model is the limit, reached at t = ∞: both are ``inf``.
    - `steps`: solver steps attempted over all phases (accepted + rejected; `max_steps` bounds
      it), `accepted_steps`: of which accepted.
    - `trajectory`: a `Trajectory` at the requested save points, or None.
    - `kinks`: for piecewise-linear models integrated through their kinks, the `KinkReport`
      (switches, slides, sliding time, final pattern, event log), else None.
    """

    model: eqx.Module
    loss: Float[Array, ""]
    time: Float[Array, ""]
    clock: Float[Array, ""]
    steps: Int[Array, ""]
    accepted_steps: Int[Array, ""]
    status: Status
    target_loss: Float[Array, ""]
    trajectory: Trajectory | None
    predictor: Float[Array, " d"] | None = None
    kinks: eqx.Module | None = None


def with_predictor(solution: Solution) -> Solution:
    """`solution` with its `predictor` field read off the model (where it offers one)."""
    if not isinstance(solution.model, AbstractPredictorModel):
        return solution
    return eqx.tree_at(lambda s: s.predictor, solution, solution.model.predictor(),
                       is_leaf=lambda x: x is None)


def observation(model):
    """What a `Trajectory` records of a model besides it: predictor and invariants where offered."""
    predictor = model.predictor() if isinstance(model, AbstractPredictorModel) else None
    invariants = model.invariants() if isinstance(model, AbstractInvariantModel) else None
    return predictor, invariants
