"""``integrate``: a flow from an initialization to its limit point, exactly, with Diffrax."""

import math
from typing import Literal

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from . import _checks
from ._dynamics.base import AbstractConvexGradientDynamics
from ._engine import SolveOptions, solve
from ._flows.base import AbstractFlow
from ._flows.gradient import GradientFlow
from ._formulation import AbstractFormulation, PreferReduction
from ._kinks.base import AbstractSwitchingDynamics
from ._losses import AbstractLoss, SquareLoss
from ._models.base import AbstractPredictorModel
from ._segments import DEFAULT_MAX_SWITCHES
from ._solution import Solution
from ._tail.base import AbstractTail
from ._tail.equilibrium import EquilibriumNewton
from ._tail.integrated import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_STIFF_SWITCH, IntegratedTail

#: Default convergence threshold, relative to the loss of the zero predictor ``mean(y²)/2``.
#: The loss falls exponentially at the end, so a tight target costs few steps; at 1e-24 the
#: remaining distance to the limit is ~1e-12 of ‖y‖ on the problems of [THEORY §2.8][theory-2-8].
DEFAULT_RELATIVE_TARGET = 1e-24
#: The clock's horizon when no time budget (`t_max`) is given: the solve ends on the loss event.
DEFAULT_T_MAX = 1e14


#: The scalar float options and their ranges (`_option`'s keywords); a sweep validates its
#: option axes with the same rules before anything runs.
FLOAT_OPTIONS = {"target_loss": {"allow_zero": True}, "rtol": {"positive": True},
                 "atol": {"allow_zero": True}, "stiff_switch": {"positive": True},
                 "t_max": {"positive": True}, "dt0": {"positive": True}}


def check_option(name: str, value) -> None:
    """Raise ValueError naming `name` unless `value` is a valid concrete value of the float
    option `name` (`FLOAT_OPTIONS`)."""
    _option(value, name, **FLOAT_OPTIONS[name])


def _option(value, name, *, positive=False, allow_zero=False):
    """A float option as an array: finite, and > 0 (or ≥ 0) where asked; ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, jax.Array)) and not hasattr(
            value, "__array__"):
        raise ValueError(f"{name} must be a real number; got {type(value).__name__}.")
    if type(value) in (float, int):  # the common case: a valid number, seen in plain Python
        number = float(value)
        if math.isfinite(number) and (number > 0 or not positive) and (
                number >= 0 or not allow_zero):
            return np.asarray(number)  # (an invalid one gets the checks below, which name it)
    # Numbers and concrete arrays are checked and kept in numpy (a jnp conversion dispatches to
    # the device per option, which would be most of `integrate`'s own overhead on a small
    # problem); the solve receives them as arguments either way.
    host = not _checks.is_traced(value)
    array = np.asarray(value) if host else _checks.as_array(value)
    if jnp.iscomplexobj(array) or array.ndim != 0:
        raise ValueError(f"{name} must be a real scalar; got {array.dtype} of shape "
                         f"{array.shape}.")
    array = _checks.finite(array.astype(float) if host else _checks.as_array(array, float), name)
    if positive:
        array = _checks.positive(array, name)
    if allow_zero:
        array = _checks._check(array, lambda a: a < 0, f"{name} must be >= 0.")
    return array


def _save_at(save_at, t_max):
    """`save_at` as a float array of strictly increasing clock values in [0, t_max] (the clock
    starts at 0; a time outside would be labelled with the requested time but hold the state
    at 0 or at t_max), refused by name before anything compiles."""
    save_at = _checks.real_array(save_at, "save_at", ndim=1)
    save_at = _checks.finite(_checks.as_array(save_at, float), "save_at")
    horizon = DEFAULT_T_MAX if t_max is None else t_max
    if _checks.is_traced(save_at) or _checks.is_traced(horizon):
        save_at = _checks._check(save_at, lambda a: (a < 0) | (a > horizon),
                                 "save_at must lie in [0, t_max].")
        return _checks._check(save_at, lambda a: jnp.concatenate(
            [jnp.zeros(1, bool), a[1:] <= a[:-1]]), "save_at must be strictly increasing.")
    times = np.asarray(save_at)
    if np.any(np.diff(times) <= 0):
        raise ValueError(f"save_at must be strictly increasing; got {times.tolist()[:8]}"
                         f"{' ...' if times.size > 8 else ''}.")
    if times[0] < 0:
        raise ValueError(f"save_at must be >= 0 (the flow's clock starts at 0); got "
                         f"{times[0]!r}.")
    if times[-1] > float(horizon):
        limit = "t_max" if t_max is not None else "the default horizon DEFAULT_T_MAX"
        raise ValueError(f"save_at has a time ({times[-1]!r}) beyond {limit} = "
                         f"{float(horizon)!r}: the flow is not integrated that far.")
    return save_at


def _max_steps(max_steps):
    if _checks.is_traced(max_steps):
        raise ValueError("max_steps cannot be traced or swept: it sets the solver's array sizes.")
    return _checks.width(max_steps, "max_steps")


def _solver(solver, name, *, allow_none=False):
    if solver is None and allow_none:
        return None
    if not isinstance(solver, dfx.AbstractAdaptiveSolver):
        raise ValueError(f"{name} must be an adaptive Diffrax solver (e.g. diffrax.Tsit5()); got "
                         f"{type(solver).__name__}.")
    return solver


def _formulation(formulation):
    if not isinstance(formulation, AbstractFormulation):
        raise ValueError(f"formulation must be ibflow.PreferReduction(), ParameterSpace() or "
                         f"Reduction(); got {type(formulation).__name__}.")
    return formulation


def _check_model(model, X):
    if not isinstance(model, eqx.Module) or not callable(model):
        raise ValueError(f"model must be an Equinox module with __call__(x) -> scalar; got "
                         f"{type(model).__name__}.")
    trained = jax.tree_util.tree_leaves_with_path(eqx.filter(model, eqx.is_inexact_array))
    if not trained:
        raise ValueError("model has no trainable (floating-point array) parameters.")
    for path, leaf in trained:
        if jnp.iscomplexobj(leaf):
            raise ValueError(f"model parameter model{jax.tree_util.keystr(path)} is complex "
                             f"({leaf.dtype}); ibflow trains real parameters only (split a "
                             "complex parameter into its real and imaginary parts).")
    predictor = _predictor_shape(model)
    if predictor is not None and predictor != X.shape[1:]:
        raise ValueError(f"the model has input dimension {predictor[0]} but X has "
                         f"{X.shape[1]} columns.")
    try:
        shape = _output_shape(model, jax.ShapeDtypeStruct(X.shape[1:], X.dtype))
    except Exception as error:  # noqa: BLE001  (any failure means a mismatch with X)
        raise ValueError(f"model cannot be applied to one row of X (shape {X.shape[1:]}): "
                         f"{error}") from error
    if shape != ():
        raise ValueError(f"model(x) must return a scalar; got shape {shape}.")


def _output_shape(model, x):
    """The shape of ``model(x)`` for one example ``x`` (a shape-dtype struct), by tracing.
    (`_apply` and `_predictor` are jitted once, so JAX's own cache keeps each trace per model
    structure and shapes: 40 µs a call after the first. ``jax.eval_shape`` of a new lambda
    traced at every call, ~0.3 ms each, which made a sliding leaky neuron's solve at rtol 1e-6
    in benchmarks/kinks.py 35–50 % slower.)"""
    return _apply.eval_shape(model, x).shape


def _predictor_shape(model):
    """The shape of ``model.predictor()`` for predictor models, else None."""
    if not isinstance(model, AbstractPredictorModel):
        return None
    return _predictor.eval_shape(model).shape


@jax.jit
def _apply(model, x):
    return model(x)


@jax.jit
def _predictor(model):
    return model.predictor()


def _output_scale(model, X):
    """``½‖θ‖² · mean_i ‖∇_θ f(xᵢ; θ)‖²`` over the trained parameters θ of `model`: the squared
    size of the outputs the parameters make before any cancellation between them
    (``|⟨θ, ∇_θ f⟩| ≤ ‖θ‖‖∇_θ f‖``; a positively homogeneous f of degree k has
    ``⟨θ, ∇_θ f⟩ = k f``). Round-off in the outputs is ~1e-16 of that size."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    grads = jax.vmap(jax.grad(lambda p, x: eqx.combine(p, static)(x)), in_axes=(None, 0))(
        params, X)
    size = sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(params))
    per_example = sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1)
                      for g in jax.tree_util.tree_leaves(grads))
    return 0.5 * size * jnp.mean(per_example)


def _positive_scale(loss_scale, model, X):
    """The loss scale of the default target and of the tail's switch level: ``mean(y²)/2``, the
    loss of the zero predictor, or where that is 0 (y ≡ 0) `_output_scale`. A scale of 0 made
    the default target 0, which round-off in the outputs keeps out of reach (a diagonal net
    from `DiagonalNet.from_scale_shape` starts at a loss of ~4e-36, not 0, under jit: the
    fused ``u₊v₊ − u₋v₋`` rounds once): the solve ran its whole step budget. Under a trace
    (y traced) the branch is a `lax.cond` whose predicate is reduced over any vmapped batch,
    so `_output_scale` runs only where some member has y ≡ 0."""
    if not _checks.is_traced(loss_scale):
        return loss_scale if loss_scale > 0 else _output_scale(model, X)
    return jax.lax.cond(eqxi.unvmap_any(loss_scale == 0),
                        lambda: jnp.where(loss_scale == 0, _output_scale(model, X), loss_scale),
                        lambda: loss_scale)


#: The default tails, built once (an Equinox module's construction runs Python checks and
#: conversions, a noticeable part of `integrate`'s own overhead on a small problem).
_KVAERNO4, _KVAERNO5 = IntegratedTail(dfx.Kvaerno4()), IntegratedTail(dfx.Kvaerno5())
_NEWTON = EquilibriumNewton()


def _stiff_solver(stiff_solver, dynamics, save_at, default_target, time_budget):
    """The tail strategy (an `AbstractTail`, or None). ``"auto"``: Newton to the equilibrium where
    the dynamics has a unique attracting one, no trajectory is asked for, the target is the
    default one (the limit) and no time budget `t_max` is set (the limit lies at t = ∞, beyond
    any budget): the path after the switch is then not needed. Otherwise Kvaerno5 (Kvaerno4
    through kinks) with the dynamics' structured Jacobian (dense for reductions, low rank by
    Woodbury in parameter space): no size cutoff, no p × p matrix; it follows the path, so a
    target of one's own (an early stop deep in the stiff tail) is met on the path. A Diffrax
    solver is an `IntegratedTail`; a tail of one's own is checked against the dynamics."""
    if isinstance(stiff_solver, str):
        if stiff_solver != "auto":
            raise ValueError("stiff_solver must be a Diffrax solver, ibflow.EquilibriumNewton(), "
                             "None or 'auto'.")
        unique = isinstance(dynamics, AbstractConvexGradientDynamics)
        if unique and save_at is None and default_target and not time_budget:
            return _NEWTON
        # Through kinks: Kvaerno4. Kvaerno5 compiles slowly through the segment loop (its
        # larger stage count, once per segment) and, on the width-4096 ReLU net under mirror
        # flow, lands 5e-10 from a tight (rtol 1e-12) reference at rtol 1e-10; Kvaerno3 is
        # accuracy-limited in a long tail (about four times Kvaerno4's steps there). Kvaerno4
        # lands 1.1e-10 from the reference and takes fewer steps than Kvaerno3 on sliding leaky
        # neurons as well.
        return _KVAERNO4 if isinstance(dynamics, AbstractSwitchingDynamics) else _KVAERNO5
    if isinstance(stiff_solver, AbstractTail):
        stiff_solver.check(dynamics, save_at)
        return stiff_solver
    solver = _solver(stiff_solver, "stiff_solver", allow_none=True)
    return None if solver is None else IntegratedTail(solver)


def _path_defaults(rtol, atol, stiff_switch, tail):
    """``rtol``, ``atol`` and ``stiff_switch`` with None replaced by the tail's defaults."""
    defaults = (DEFAULT_RTOL, DEFAULT_ATOL, DEFAULT_STIFF_SWITCH) if tail is None else (
        tail.path_defaults())
    return tuple(d if v is None else v for v, d in zip((rtol, atol, stiff_switch), defaults))


def integrate(
    model: eqx.Module, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    flow: AbstractFlow = GradientFlow(), loss: AbstractLoss = SquareLoss(),
    target_loss: Float[ArrayLike, ""] | None = None, rtol: Float[ArrayLike, ""] | None = None,
    atol: Float[ArrayLike, ""] | None = None, solver: dfx.AbstractAdaptiveSolver = dfx.Tsit5(),
    stiff_solver: dfx.AbstractAdaptiveSolver | EquilibriumNewton | None | Literal["auto"] = "auto",
    stiff_switch: Float[ArrayLike, ""] | None = None, max_steps: int = 100_000,
    t_max: Float[ArrayLike, ""] | None = None, save_at: Float[ArrayLike, " T"] | None = None,
    formulation: AbstractFormulation = PreferReduction(),
    throw: bool = True, adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint(),
    dt0: Float[ArrayLike, ""] | None = None, progress: bool = False,
    max_switches: int = DEFAULT_MAX_SWITCHES,
) -> Solution:
    """Integrate ``flow`` on ``loss`` from ``model`` until the loss reaches ``target_loss``.

    The ODE is solved with an adaptive Diffrax solver in float64 and stops on an event,
    ``L(θ) ≤ target_loss``, not at a guessed horizon; long plateaus of small initializations
    cost few steps because the controller grows the step. All of ibflow's flows run through the
    same engine (``ibflow._engine.solve``).

    **Arguments:**
    - `model`: the initialization: any Equinox module whose ``__call__(x)`` maps one example
      (d,) to a scalar; its floating-point array leaves are trained. No ibflow base class needed.
    - `X`, `y`: data, shapes (n, d) and (n,), finite.
    - `flow`: the geometry (`GradientFlow()`, `MirrorFlow`, `WarpedFlow`, `LossClock`).
      `loss`: `SquareLoss()` etc.
    - `target_loss`: convergence threshold ≥ 0; default ``1e-24 · mean(y²)/2``, and for
      y ≡ 0 ``1e-24 · ½‖θ₀‖² mean_i ‖∇_θ f(xᵢ; θ₀)‖²`` (the start's outputs without
      cancellation; the tail's switch level uses the same scale).
    - `rtol` > 0, `atol` ≥ 0: the step-size controller's tolerances, i.e. the accuracy of the
      path. `solver`: any adaptive Diffrax solver for the first phase. Default (None): 1e-10 and
      1e-14; with the Newton tail (`EquilibriumNewton`, see below) 1e-6 and 1e-10, because the
      limit then does not depend on the path and the tolerance only sets the accuracy of the
      switch time (the limit's accuracy is the target's; see `DEFAULT_NEWTON_RTOL`).
    - `stiff_solver`, `stiff_switch` > 0: the last phase of a flow is stiff (the tangent
      kernel's eigenvalues spread over many decades, [THEORY §8.1][theory-8-1]), so once
      ``L ≤ stiff_switch · mean(y²)/2`` (and not before the target) the solve continues with
      `stiff_solver` (default `stiff_switch`: 1e-8, or 1 with the Newton tail). With the
      default level and an implicit tail, the tail also starts as soon as the explicit phase
      is stiff: below ``1e-2 · mean(y²)/2``, 1000 attempted steps without a decade of loss
      decrease (``ibflow._tail.stiffness``; a stability-limited explicit solver, e.g. 14 000
      Tsit5 steps of a width-4096 ReLU net under mirror flow). A `stiff_switch` of one's own
      is the switch level, with no detection.
      ``"auto"``: for dynamics with one attracting equilibrium (the diagonal
      net's reduction: a gradient flow of a strictly convex dual), no `save_at`, the
      default `target_loss` (the limit) and no `t_max` (the limit is the state at t = ∞),
      `EquilibriumNewton()` finishes the tail by damped Newton on the vector field (its limit
      does not depend on the path); otherwise Kvaerno5 (Kvaerno4 for piecewise-linear models
      through their kinks) whose stage equations use the dynamics'
      structured Jacobian: the closed form for reductions, the Gauss–Newton low-rank form ``J``
      (n × p) with an n × n Woodbury solve in parameter space, so the tail costs O(n·p) memory
      at any size. ``None`` disables the tail. With `EquilibriumNewton`, `Solution.time` and
      `clock` are those of the switch (the remaining, infinitely long path is not integrated)
      and each Newton iteration counts as one step; a target above ``LIMIT_LEVEL · mean(y²)/2``
      (1e-16: an early stop rather than the limit) is reached by the explicit phase on the path
      itself, never by Newton.
    - `max_steps` ≥ 1 (a Python int): the total step budget over all phases (accepted and
      rejected steps); `t_max` > 0: the largest clock value, a time budget (default None: none,
      the clock runs to 1e14). Running out of either gives
      `Status.budget_exhausted`; a clock that stops advancing (less than 1e-6 relative over
      4096 steps) gives `Status.stalled`. Chattering at a kink that still advances the clock
      slowly runs until the budget (piecewise-linear models do not chatter: see Kinks below).
    - `save_at`: increasing clock values at which to record the `Trajectory`.
    - `formulation`: `PreferReduction()` (default: a closed-form reduction when the model
      offers one, e.g. the diagonal net's n-dim ODE of [THEORY §2.3][theory-2-3]),
      `ParameterSpace()` or `Reduction()`.
    - `throw`: raise if the flow did not converge. With ``False`` the status says what happened.
    - `dt0` > 0: the first step size (None lets Diffrax choose it).
    - `adjoint`: reverse-mode differentiation through the solve, e.g.
      ``diffrax.RecursiveCheckpointAdjoint(checkpoints=c)``.
    - `progress`: show a progress bar (decades of loss towards the target) on stderr.
    - `max_switches` ≥ 1: for piecewise-linear models (ReLU-type activations, integrated
      through their kinks, [THEORY §8.2][theory-8-2]), the budget of switching events (crossings,
      slide entries and exits); more ends with `Status.unresolved_switching`.

    **Kinks.** For an `AbstractPiecewiseLinearModel` (`LeakyReLUNeuron`, `ShallowNet`, ...),
    each pre-activation's crossing of 0 is located as an event; the solve restarts there with
    the new activation pattern, or slides (Filippov: the one-sided fields push into the kink
    from both sides, and equivalent-control slopes ``σ'(0) ∈ [lo, hi]`` keep the pre-activation
    at 0) until a multiplier reaches its bound. `Solution.kinks` reports the switches, slides,
    sliding time and final pattern. ``formulation=ParameterSpace(kinks=False)`` treats the
    model as smooth instead.

    The status is `converged` if and only if the returned model's loss is ≤ `target_loss`;
    `stationary` when, in parameter space, the flow's field vanished first, above the target (a
    spurious minimum or a saddle, polished by Newton; `ibflow.certify` tells which).
    Tolerances, targets and every array in `model` are traced, so integrating many
    initializations (or tolerances) compiles once.
    """
    X, y = _checks.data(X, y)
    _check_model(model, X)
    if not isinstance(flow, AbstractFlow):
        raise ValueError(f"flow must be an ibflow flow (e.g. GradientFlow()); got "
                         f"{type(flow).__name__}.")
    if not isinstance(loss, AbstractLoss):
        raise ValueError(f"loss must be an ibflow loss (e.g. SquareLoss()); got "
                         f"{type(loss).__name__}.")
    if not isinstance(adjoint, dfx.AbstractAdjoint):
        raise ValueError(f"adjoint must be a Diffrax adjoint; got {type(adjoint).__name__}.")
    if not isinstance(throw, bool) or not isinstance(progress, bool):
        raise ValueError("throw and progress must be True or False.")
    # On the host when y is concrete (an eager jnp reduction dispatches to the device).
    with np.errstate(over="ignore"):  # an overflow is refused just below, naming y
        loss_scale = (0.5 * jnp.mean(y**2) if _checks.is_traced(y)
                      else np.asarray(0.5 * np.mean(np.asarray(y) ** 2)))
    if not _checks.is_traced(loss_scale) and not np.isfinite(loss_scale):
        raise ValueError(f"y is too large for float64: mean(y²)/2 overflows (max |y| = "
                         f"{float(np.max(np.abs(np.asarray(y)))):.3g}); rescale y.")
    default_target = target_loss is None
    loss_scale = _positive_scale(loss_scale, model, X)
    if target_loss is None:
        target_loss = DEFAULT_RELATIVE_TARGET * loss_scale
    if save_at is not None:
        save_at = _save_at(save_at, t_max)
    formulation = _formulation(formulation)
    # Through the class: a bound method of a module is a module built at each access.
    dynamics = type(formulation).dynamics(formulation, model, X, y, flow, loss)
    tail = _stiff_solver(stiff_solver, dynamics, save_at, default_target, t_max is not None)
    watch_stiffness = stiff_switch is None  # an explicit level is the level
    rtol, atol, stiff_switch = _path_defaults(rtol, atol, stiff_switch, tail)
    options = SolveOptions(
        rtol=_option(rtol, "rtol", **FLOAT_OPTIONS["rtol"]),
        atol=_option(atol, "atol", **FLOAT_OPTIONS["atol"]),
        target_loss=_option(target_loss, "target_loss", **FLOAT_OPTIONS["target_loss"]),
        stiff_switch=_option(stiff_switch, "stiff_switch", **FLOAT_OPTIONS["stiff_switch"]),
        loss_scale=loss_scale,
        t_max=_option(DEFAULT_T_MAX if t_max is None else t_max, "t_max",
                      **FLOAT_OPTIONS["t_max"]),
        dt0=None if dt0 is None else _option(dt0, "dt0", **FLOAT_OPTIONS["dt0"]),
        save_at=save_at,
        solver=_solver(solver, "solver"), stiff_solver=tail,
        adjoint=adjoint, max_steps=_max_steps(max_steps), throw=throw, progress=progress,
        max_switches=_checks.switch_budget(max_switches), watch_stiffness=watch_stiffness)
    return solve(dynamics, options)


__all__ = ["integrate"]
