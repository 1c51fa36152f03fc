"""Gradient flow of a `TwoLayerClassifier` on an exponentially tailed loss, in a clock that stays
efficient while ``‖θ‖ → ∞`` (THEORY §4.0–4.1, §2.2 [AZ-WARP]).

The flow is ordinary `ibflow.integrate` in the classifier's span coordinates
(`ClassifierReducedDynamics`, exact). The clock is a flow: `LossClock(GradientFlow())`
(default, clock ``c = log L(0) − log L``), `WarpedFlow(GradientFlow(), lambda m, L: 1 / L)`
(``dθ/dτ = −∇ log L``) or `GradientFlow()` (real time, to compare with gradient descent at
``t = kη``). Plain gradient flow needs real time ``t ~ 1/L`` to reach loss L; in the log-loss
clock the velocity stays O(1) and reaching 1e-30 costs steps ∝ log(1e30).
"""

import diffrax as dfx
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._engine import SolveOptions, solve
from .._flows.base import AbstractFlow
from .._flows.gradient import GradientFlow
from .._flows.loss_clock import LossClock
from .._flows.warped import WarpedFlow
from .._formulation import Reduction
from .._losses import AbstractLoss, LogisticLoss
from .._models.classifier import TwoLayerClassifier
from .._solution import Solution


def _inverse_loss(model, loss):
    return 1.0 / loss


#: The deprecated ``clock=`` strings and the flows that replace them.
CLOCKS = {"log-loss": LossClock(GradientFlow()),
          "warped": WarpedFlow(GradientFlow(), _inverse_loss), "time": GradientFlow()}


def classification_flow(
    model: TwoLayerClassifier, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    flow: AbstractFlow | None = None, clock: str | None = None,
    loss: AbstractLoss = LogisticLoss(), target_loss: Float[ArrayLike, ""] = 1e-6,
    save_at: Float[ArrayLike, " T"] | None = None, num_save: int = 64,
    rtol: Float[ArrayLike, ""] = 1e-6, atol: Float[ArrayLike, ""] = 1e-8,
    solver: dfx.AbstractAdaptiveSolver = dfx.Tsit5(), max_steps: int = 100_000,
    clock_max: Float[ArrayLike, ""] = 1e12, throw: bool = True,
) -> Solution:
    """Gradient flow of a two-layer classifier until ``L ≤ target_loss`` (THEORY §4), through
    the one engine, returning the one `Solution` type (with a `Trajectory` of models).

    **Arguments:**
    - `model`: the initialization (`TwoLayerClassifier`); `X` (n, d), `y` (n,) with labels ±1.
    - `flow`: the clock as a flow: `LossClock(GradientFlow())` (default), `WarpedFlow(...)` or
      `GradientFlow()`. `clock` ("log-loss" | "warped" | "time") is its deprecated spelling.
    - `loss`: `LogisticLoss()` or `ExponentialLoss()` (mean over examples).
    - `target_loss`: stop when the loss reaches it.
    - `save_at`: increasing clock values at which to save the model. Default: `num_save` points
      from 0 to the end for the log-loss clock (``c = log(L(0)/target)``), from 0 to
      `clock_max` for the others (pass `save_at` then).
    - `rtol`, `atol`, `solver`, `max_steps`: the ODE solve; `clock_max` bounds the clock for
      clocks other than the log-loss one.
    - `throw`: raise unless the target was reached.

    The ReLU/leaky-ReLU field jumps where a pre-activation changes sign; the adaptive controller
    shrinks its step there (moderate default rtol 1e-6).
    """
    if not isinstance(model, TwoLayerClassifier):
        raise ValueError(f"model must be a TwoLayerClassifier; got {type(model).__name__}.")
    if clock is not None:
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {tuple(CLOCKS)}; got {clock!r}.")
        if flow is not None:
            raise ValueError("pass flow=... or the deprecated clock=..., not both.")
        flow = CLOCKS[clock]
    flow = LossClock(GradientFlow()) if flow is None else flow
    if not isinstance(loss, AbstractLoss):
        raise ValueError("loss must be an ibflow loss, e.g. LogisticLoss().")
    X, y = _checks.data(X, y)
    if model.first.shape[-1] != X.shape[1]:
        raise ValueError(f"the model has input dimension {model.first.shape[-1]} but X has "
                         f"{X.shape[1]} columns.")
    if not _checks.is_traced(y) and not bool(jnp.all(jnp.abs(y) == 1)):
        raise ValueError("classification labels y must be -1 or +1.")
    target_loss = _checks.positive(_checks.as_array(target_loss, float), "target_loss")
    dynamics = Reduction().dynamics(model, X, y, flow, loss)
    if isinstance(flow, LossClock):
        end = jnp.log(dynamics.loss(dynamics.initial_state()) / target_loss)
        # The event ends the solve; the margin guards the drift of c against log(L0/L), which
        # the solver's error accumulates (measured: 1.57 nats at 1e-30 for the ReLU mixture
        # classifier, whose field jumps at the kinks; a fixed +1 ended it budget_exhausted at
        # 1.8e-30). A flow that stalls still stops here or at max_steps.
        t_max = end + jnp.maximum(1.0, 0.1 * end)
    else:
        end = t_max = jnp.asarray(clock_max, dtype=float)
    if save_at is None:
        save_at = jnp.linspace(0.0, 1.0, int(num_save)) * end
    save_at = jnp.asarray(save_at, dtype=float)
    if save_at.ndim != 1:
        raise ValueError("save_at must be a 1-d array of increasing clock values.")
    options = SolveOptions(
        rtol=_checks.positive(_checks.as_array(rtol, float), "rtol"),
        atol=jnp.asarray(atol, dtype=float), target_loss=target_loss,
        stiff_switch=jnp.asarray(1.0), loss_scale=jnp.asarray(1.0), t_max=t_max, dt0=None,
        save_at=save_at, solver=solver, stiff_solver=None,
        adjoint=dfx.RecursiveCheckpointAdjoint(), max_steps=int(max_steps), throw=throw,
        progress=False)
    return solve(dynamics, options)
