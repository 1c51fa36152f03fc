"""Gradient flow of a `TwoLayerClassifier` on an exponentially tailed loss, in a clock that stays
efficient while ``‖θ‖ → ∞`` ([THEORY §4.0–4.1][theory-4-0], [§2.2][theory-2-2]
[AZ-WARP][theory-az-warp]).

The flow is a preset of `ibflow.integrate`: the classifier's span coordinates
(`ClassifierReducedDynamics`, exact), through the activation's kinks by default
(`ClassifierKinkedDynamics`: located switches and Filippov sliding, [THEORY §8.2][theory-8-2]). The
clock is a flow: `LossClock(GradientFlow())` (default, clock ``c = log L(0) − log L``),
`WarpedFlow(GradientFlow(), lambda m, L: 1 / L)` (``dθ/dτ = −∇ log L``) or `GradientFlow()`
(real time, to compare with gradient descent at ``t = kη``). Plain gradient flow needs real
time ``t ~ 1/L`` to reach loss L; in the log-loss clock the velocity stays O(1) and reaching
1e-30 costs steps ∝ log(1e30).
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._flows.base import AbstractFlow, AbstractLossClockFlow
from .._flows.gradient import GradientFlow
from .._flows.loss_clock import LossClock
from .._formulation import Reduction
from .._integrate import integrate
from .._losses import AbstractLoss, LogisticLoss
from .._models.base import AbstractReducibleModel
from .._models.piecewise_linear import AbstractPiecewiseLinearModel
from .._segments import DEFAULT_MAX_SWITCHES
from .._solution import Solution


def _neurons(model, X) -> int:
    """The number of kinked units per example (pre-activations of a piecewise-linear model, 0
    otherwise), after checking that the model takes the rows of `X`."""
    row = jax.ShapeDtypeStruct(X.shape[1:], X.dtype)
    try:
        jax.eval_shape(model, row)
        pre = (jax.eval_shape(model.preactivations, row)
               if isinstance(model, AbstractPiecewiseLinearModel) else None)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the model's input dimension does not match X's {X.shape[1]} columns "
                         f"({error}).") from error
    return 0 if pre is None else int(pre.shape[0])


def classification_flow(
    model: AbstractReducibleModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    flow: AbstractFlow | None = None,
    loss: AbstractLoss = LogisticLoss(), target_loss: Float[ArrayLike, ""] = 1e-6,
    save_at: Float[ArrayLike, " T"] | None = None, num_save: int = 64,
    rtol: Float[ArrayLike, ""] = 1e-6, atol: Float[ArrayLike, ""] = 1e-8,
    solver: dfx.AbstractAdaptiveSolver = dfx.Tsit5(), max_steps: int = 100_000,
    clock_max: Float[ArrayLike, ""] = 1e12, throw: bool = True,
    max_switches: int | None = None, kinks: bool = True,
) -> Solution:
    """Gradient flow of a two-layer classifier until ``L ≤ target_loss`` ([THEORY §4][theory-4]),
    through the one engine, returning the one `Solution` type (with a `Trajectory` of models).

    **Arguments:**
    - `model`: the initialization: a model with a closed-form reduction for this flow and loss
      (`AbstractReducibleModel`: the `TwoLayerClassifier`'s span coordinates); `X` (n, d), `y`
      (n,) with labels ±1.
    - `flow`: the clock as a flow: `LossClock(GradientFlow())` (default), `WarpedFlow(...)` or
      `GradientFlow()`.
    - `loss`: `LogisticLoss()` or `ExponentialLoss()` (mean over examples).
    - `target_loss`: stop when the loss reaches it.
    - `save_at`: increasing clock values at which to save the model. Default: `num_save` points
      from 0 to the end for the log-loss clock (``c = log(L(0)/target)``), from 0 to
      `clock_max` for the others (pass `save_at` then).
    - `rtol`, `atol`, `solver`, `max_steps`: the ODE solve; `clock_max` bounds the clock for
      clocks other than the log-loss one.
    - `throw`: raise unless the target was reached.
    - `kinks`: integrate through the activation's kinks (default): every crossing of a
      pre-activation through 0 is located as an event, and pairs that the field pushes into
      the kink from both sides slide on it (Filippov, [THEORY §8.2][theory-8-2]; `Solution.kinks`
      reports them). False integrates the field as if it were smooth, where the adaptive solver
      chatters on a slide.
    - `max_switches` ≥ 1: the budget of activation switches (pairs crossing, slide entries
      and exits) through the kinks; more ends with `Status.unresolved_switching`. Default:
      four per (example, neuron) pair, at least 2 000 (scikit-learn's digits, n = 50,
      m = 100, ReLU, to loss 1e-30: 5 500 switches).

    The ReLU/leaky-ReLU field jumps where a pre-activation changes sign. Through the kinks (the
    default) each such switch is an event and the solver restarts there, so it never steps
    across a jump; with ``kinks=False`` the adaptive controller shrinks its step at each jump
    (moderate default rtol 1e-6) and chatters on slides. Under ``vmap`` the kinked solve runs
    its segments in lockstep (every member waits for the others' events): loop over members
    with one ``equinox.filter_jit``-compiled call for many kinked flows.
    """
    if not isinstance(model, AbstractReducibleModel):
        raise ValueError(f"model must offer a closed-form reduction (AbstractReducibleModel, "
                         f"e.g. TwoLayerClassifier); got {type(model).__name__}.")
    flow = LossClock(GradientFlow()) if flow is None else flow
    if not isinstance(flow, AbstractFlow):
        raise ValueError(f"flow must be an ibflow flow, e.g. LossClock(GradientFlow()); got "
                         f"{type(flow).__name__}.")
    if not isinstance(loss, AbstractLoss):
        raise ValueError("loss must be an ibflow loss, e.g. LogisticLoss().")
    X, y = _checks.data(X, y)
    neurons = _neurons(model, X)
    if not _checks.is_traced(y) and not bool(np.all(np.abs(np.asarray(y)) == 1)):
        raise ValueError("classification labels y must be -1 or +1.")
    target_loss = _checks.positive(_checks.as_array(target_loss, float), "target_loss")
    if not isinstance(kinks, bool):
        raise ValueError(f"kinks must be True or False; got {kinks!r}.")
    if isinstance(flow, AbstractLossClockFlow):
        end = flow.clock_at_loss(loss(jax.vmap(model)(X), y), target_loss)
        # The event ends the solve; the margin guards the drift of c against log(L0/L), which
        # the solver's error accumulates (more than one nat down to 1e-30 where the field jumps
        # at the kinks, so a fixed margin of 1 is too little). A flow that stalls still stops
        # here or at max_steps.
        t_max = end + jnp.maximum(1.0, 0.1 * end)
    else:
        end = t_max = jnp.asarray(clock_max, dtype=float)
    if save_at is None:
        save_at = jnp.linspace(0.0, 1.0, int(num_save)) * end
    save_at = jnp.asarray(save_at, dtype=float)
    if save_at.ndim != 1:
        raise ValueError("save_at must be a 1-d array of increasing clock values.")
    return integrate(
        model, X, y, flow=flow, loss=loss, target_loss=target_loss,
        rtol=rtol, atol=atol, solver=solver, stiff_solver=None,
        max_steps=int(max_steps), t_max=t_max, save_at=save_at,
        formulation=Reduction(kinks=kinks), throw=throw,
        max_switches=(max(DEFAULT_MAX_SWITCHES, 4 * X.shape[0] * neurons)
                      if max_switches is None else max_switches))
