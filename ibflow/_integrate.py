"""``integrate``: a flow from an initialization to its limit point, exactly, with Diffrax."""

from typing import Literal

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from . import _checks
from ._dynamics import AbstractDynamics, DiagonalReducedDynamics, ParameterDynamics
from ._flows.base import AbstractFlow
from ._flows.gradient import GradientFlow
from ._losses import AbstractLoss, SquareLoss
from ._models.base import AbstractModel, AbstractPredictorModel
from ._models.diagonal import DiagonalNet
from ._solution import Solution, Status, Trajectory, status_from_diffrax

Method = Literal["auto", "parameters", "reduced"]

#: Default convergence threshold, relative to the loss of the zero predictor ``mean(y²)/2``.
#: The loss falls exponentially at the end, so a tight target costs few steps; at 1e-24 the
#: remaining distance to the limit is ~1e-12 of ‖y‖ on the problems of THEORY §2.8.
DEFAULT_RELATIVE_TARGET = 1e-24
#: ``stiff_solver="auto"`` uses an implicit tail phase only for states up to this size.
STIFF_AUTO_MAX_STATE = 1024


def _select_dynamics(model, X, y, flow, loss, method: Method) -> AbstractDynamics:
    reducible = (isinstance(model, DiagonalNet) and type(flow) is GradientFlow
                 and type(loss) is SquareLoss)
    if method == "reduced" and not reducible:
        raise ValueError("method='reduced' needs a DiagonalNet with GradientFlow and SquareLoss.")
    if method not in ("auto", "parameters", "reduced"):
        raise ValueError(f"method must be 'auto', 'parameters' or 'reduced'; got {method!r}.")
    if reducible and method != "parameters":
        return DiagonalReducedDynamics(model, X, y)
    return ParameterDynamics(model, X, y, flow, loss)


def _predictor(model):
    return model.predictor() if isinstance(model, AbstractPredictorModel) else None


def _phase(dynamics, solver, state0, t0, *, rtol, atol, stop_at, t_max, max_steps, save_at,
           adjoint, dt0=None):
    """One ``diffeqsolve`` from ``(t0, state0)`` until ``L ≤ stop_at`` (or non-finite)."""

    def stop(t, state, args, **kwargs):
        value = dynamics.loss(state)
        return (value <= stop_at) | ~jnp.isfinite(value)

    def observe(t, state, args):
        model = dynamics.model(state)
        return dynamics.loss(state), _predictor(model), model.invariants()

    subs = [dfx.SubSaveAt(t1=True)]
    if save_at is not None:
        # Times before this phase's start belong to an earlier phase (see _merge_saved).
        subs.append(dfx.SubSaveAt(ts=jnp.clip(save_at, t0, t_max), fn=observe))
    return dfx.diffeqsolve(
        dfx.ODETerm(dynamics.vector_field), solver, t0=t0, t1=t_max, dt0=dt0, y0=state0,
        stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
        event=dfx.Event(stop), saveat=dfx.SaveAt(subs=subs), max_steps=max_steps, throw=False,
        adjoint=adjoint,
    )


def _merge_saved(first, second, t_switch):
    """Saved values of the two phases: times before the switch come from the first."""
    return jax.tree_util.tree_map(
        lambda a, b: None if a is None else jnp.where(
            (t_switch > first[0]).reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
        first[1], second[1], is_leaf=lambda x: x is None)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counted by tests: one trace per configuration
def _integrate(dynamics: AbstractDynamics, *, solver, stiff_solver, rtol, atol, target_loss,
               stiff_switch, loss_scale, t_max, max_steps, save_at, throw, adjoint,
               dt0) -> Solution:
    common = dict(rtol=rtol, atol=atol, t_max=t_max, max_steps=max_steps, save_at=save_at,
                  adjoint=adjoint)
    first = _phase(dynamics, solver, dynamics.initial_state(), 0.0,
                   stop_at=target_loss if stiff_solver is None else jnp.maximum(
                       target_loss, stiff_switch * loss_scale),
                   dt0=dt0, **common)
    sol, steps = first, first.stats["num_accepted_steps"]
    if stiff_solver is not None:
        start = jax.tree_util.tree_map(lambda a: a[-1], first.ys[0])
        sol = _phase(dynamics, stiff_solver, start, first.ts[0][-1], stop_at=target_loss,
                     **common)
        steps = steps + sol.stats["num_accepted_steps"]
        # A first phase that failed or ran out of budget decides the outcome.
        result = dfx.RESULTS.where(first.result == dfx.RESULTS.event_occurred, sol.result,
                                   first.result)
    else:
        result = sol.result
    final_state = jax.tree_util.tree_map(lambda a: a[-1], sol.ys[0])
    model = dynamics.model(final_state)
    loss = dynamics.loss(final_state)
    trajectory = None
    if save_at is not None:
        saved = sol.ys[1]
        if stiff_solver is not None:
            saved = _merge_saved((save_at, first.ys[1]), (save_at, sol.ys[1]), first.ts[0][-1])
        loss_t, pred_t, inv_t = saved
        trajectory = Trajectory(ts=save_at, loss=loss_t, predictor=pred_t, invariants=inv_t)
    out = Solution(model=model, predictor=_predictor(model), loss=loss, time=sol.ts[0][-1],
                   steps=steps, status=status_from_diffrax(result, loss), target_loss=target_loss,
                   trajectory=trajectory)
    if throw:
        out = eqx.error_if(out, out.status != Status.converged,
                           "integrate: the flow did not converge (see Solution.status; pass "
                           "throw=False to get the Solution anyway).")
    return out


def integrate(
    model: AbstractModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    flow: AbstractFlow = GradientFlow(), loss: AbstractLoss = SquareLoss(),
    target_loss: Float[ArrayLike, ""] | None = None, rtol: Float[ArrayLike, ""] = 1e-10,
    atol: Float[ArrayLike, ""] = 1e-14, solver: dfx.AbstractAdaptiveSolver = dfx.Tsit5(),
    stiff_solver: dfx.AbstractAdaptiveSolver | None | Literal["auto"] = "auto",
    stiff_switch: Float[ArrayLike, ""] = 1e-8, max_steps: int = 100_000, t_max: Float[ArrayLike, ""] = 1e14,
    save_at: Float[ArrayLike, " T"] | None = None, method: Method = "auto", throw: bool = True,
    adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint(),
    dt0: Float[ArrayLike, ""] | None = None,
) -> Solution:
    """Integrate ``flow`` on ``loss`` from ``model`` until the loss reaches ``target_loss``.

    The ODE is solved with an adaptive Diffrax solver (Tsit5 + PID controller by default) in
    float64 and stops on an event, ``L(θ) ≤ target_loss``, not at a guessed horizon; long plateaus
    of small initializations cost few steps because the controller grows the step.

    **Arguments:**
    - `model`: the initialization, any ibflow model.
    - `X`, `y`: data, shapes (n, d) and (n,), finite.
    - `flow`: the geometry (`GradientFlow()`, a mirror or warped flow). `loss`: `SquareLoss()` etc.
    - `target_loss`: convergence threshold; default ``1e-24 · mean(y²)/2`` (tight enough that the
      limit point is accurate to ~1e-10 relative). Known limit: the implicit tail solves its
      stage equations to ``rtol`` relative to the *state*, so when the state is much larger
      than the distance still to travel (scales α ≳ 1e3 with targets near the initial outputs)
      the loss stalls above this default; use ``solver=diffrax.Dopri8(), stiff_solver=None``
      and a target relative to the residual there (tests/test_theory_ntk.py does).
    - `rtol`, `atol`: the step-size controller's tolerances. `solver`: any adaptive Diffrax solver.
    - `stiff_solver`, `stiff_switch`: the last phase of a flow is stiff (the slowest mode of the
      tangent kernel at the limit can be 1e4–1e6 times slower than the fastest), where an
      explicit solver crawls at its stability limit. So once ``L ≤ stiff_switch · mean(y²)/2``
      (and not before the target: loose targets never need it) the solve continues with
      `stiff_solver` (Kvaerno5 by default: tens of steps instead of
      ~1e5). ``"auto"`` uses Kvaerno5 when the ODE state has at most 1024 entries (its Jacobian
      is then cheap) and no stiff phase otherwise; ``None`` disables it.
    - `max_steps`, `t_max`: the budget; running out of either gives `Status.budget_exhausted`.
    - `save_at`: increasing times at which to record loss, predictor and invariants.
    - `method`: ``"auto"`` uses the closed-form reduction of the diagonal net (THEORY §2.3) when
      it applies (``DiagonalNet`` + ``GradientFlow`` + ``SquareLoss``); ``"parameters"`` always
      integrates the parameters.
    - `throw`: raise if the flow did not converge. With ``False`` the status says what happened.
    - `dt0`: the first step size; None lets Diffrax choose it. Pass a small value (e.g. 1e-9)
      when the initial gradient is huge (large-scale initializations with targets far from the
      initial outputs): Tsit5's automatic first step can then be rejected forever
      (`Status.budget_exhausted` at t = 0).
    - `adjoint`: how reverse-mode derivatives through the solve are computed (both phases), e.g.
      ``diffrax.RecursiveCheckpointAdjoint(checkpoints=c)``: memory ≈ c saved states however
      many steps the solve takes (the default ``c = None`` is ≈ sqrt(2·max_steps)).

    Tolerances, targets and every array in `model` are traced, so integrating many
    initializations (or tolerances) compiles once.
    """
    if not isinstance(model, AbstractModel):
        raise ValueError(f"model must be an ibflow model; got {type(model).__name__}.")
    X, y = _checks.data(X, y)
    if isinstance(model, AbstractPredictorModel) and model.predictor().shape != X.shape[1:]:
        raise ValueError(
            f"the model has input dimension {model.predictor().shape[0]} but X has "
            f"{X.shape[1]} columns.")
    if target_loss is None:
        target_loss = DEFAULT_RELATIVE_TARGET * 0.5 * jnp.mean(jnp.asarray(y) ** 2)
    floats = {k: jnp.asarray(v, dtype=float) for k, v in
              dict(rtol=rtol, atol=atol, target_loss=target_loss, t_max=t_max).items()}
    if save_at is not None:
        save_at = jnp.asarray(save_at, dtype=float)
        if save_at.ndim != 1:
            raise ValueError("save_at must be a 1-d array of increasing times.")
    dynamics = _select_dynamics(model, X, y, flow, loss, method)
    if isinstance(stiff_solver, str):
        if stiff_solver != "auto":
            raise ValueError("stiff_solver must be a Diffrax solver, None or 'auto'.")
        size = sum(a.size for a in jax.tree_util.tree_leaves(dynamics.initial_state()))
        stiff_solver = dfx.Kvaerno5() if size <= STIFF_AUTO_MAX_STATE else None
    if not isinstance(adjoint, dfx.AbstractAdjoint):
        raise ValueError(f"adjoint must be a Diffrax adjoint; got {type(adjoint).__name__}.")
    return _integrate(dynamics, solver=solver, stiff_solver=stiff_solver,
                      max_steps=int(max_steps), save_at=save_at, throw=throw, adjoint=adjoint,
                      dt0=None if dt0 is None else jnp.asarray(dt0, dtype=float),
                      stiff_switch=jnp.asarray(stiff_switch, dtype=float),
                      loss_scale=0.5 * jnp.mean(jnp.asarray(y) ** 2), **floats)


__all__ = ["integrate"]
