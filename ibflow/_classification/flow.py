"""Gradient flow of a `TwoLayerClassifier` on an exponentially tailed loss, in a clock that stays
efficient while ``‖θ‖ → ∞`` (THEORY §4.0–4.1, §2.2 [AZ-WARP]).

**Reduction (exact).** ``∇_{wⱼ} L = Σᵢ Dⱼᵢ xᵢ`` with ``D = ∂L/∂P`` the derivative with respect to
the pre-activations ``Pⱼᵢ = ⟨wⱼ, xᵢ⟩ + bⱼ``. So under gradient flow ``W(t) = W(0) + C(t) X`` with
``C ∈ ℝ^{m×n}``, ``dC/dt = −D``, and ``P = W(0)Xᵀ + C G + b1ᵀ`` with the Gram matrix ``G = XXᵀ``.
The ODE state is ``C`` (m·n numbers, not m·d: 1 000 instead of 78 400 for the seed) plus ``a``/``b``
when trained, plus the real time t. When n > d the span coordinates are no cheaper, and the state
holds ``W − W(0)`` instead (same ODE).

**Clocks.** Plain gradient flow needs real time ``t ~ 1/L`` to reach loss L; every clock below
runs the same path (THEORY §2.2: a positive scalar factor g on the velocity only reparametrizes
time) with ``dθ/dc = −g ∇L`` and records ``dt/dc = g``:

* ``"log-loss"`` (default): ``c = s = −log L``, ``g = L/‖∇L‖²``, i.e. ``dθ/ds = −∇log L/‖∇log L‖²``.
  The end ``s = −log(target)`` is known in advance and save points are loss levels
  (``s = −log ℓ``). Late in training ``‖∇ log L‖`` tends to a positive constant (≈ the normalized
  margin), so the velocity stays O(1) while ‖θ‖ grows linearly in s.
* ``"warped"``: ``g = 1/L``, the clock τ of ``WarpedFlow(GradientFlow(), 1/L)``:
  ``dθ/dτ = −∇ log L`` and ``t = ∫ dτ / L``.
* ``"time"``: g = 1, real time (used to compare with gradient descent at ``t = kη``).
"""

from typing import Literal

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from .. import _checks
from .._losses import AbstractLoss, LogisticLoss
from .._models.classifier import TwoLayerClassifier, leaky_relu
from .._solution import Status, status_from_diffrax

Clock = Literal["log-loss", "warped", "time"]
_CLOCKS = ("log-loss", "warped", "time")


class ClassifierTrajectory(eqx.Module):
    """A classifier's path at the saved points (a flow's save points or every k-th GD step).

    **Fields:**
    - `clock` (T,): the integration variable at each point (``−log L`` for the log-loss clock,
      τ for the warped clock, t for real time; the step index k for gradient descent). Points past
      the end of the solve hold ``inf`` everywhere; `valid` masks them.
    - `time` (T,): real gradient-flow time t (``k·η`` for gradient descent).
    - `loss` (T,): the training loss.
    - `models`: the `TwoLayerClassifier` at each point, batched along a leading T axis (apply
      ``classifier_diagnostics`` with `trajectory_diagnostics`).
    """

    clock: Float[Array, " T"]
    time: Float[Array, " T"]
    loss: Float[Array, " T"]
    models: TwoLayerClassifier

    @property
    def valid(self):
        return jnp.isfinite(self.clock) & jnp.isfinite(self.loss)


class ClassificationSolution(eqx.Module):
    """End of a classification flow.

    `model`: final model. `loss`: final loss. `time`: real time t reached. `clock`: final value of
    the integration variable. `steps`: accepted solver steps. `status`: a `Status`; `converged`
    means ``loss ≤ target_loss``. `trajectory`: a `ClassifierTrajectory` at the save points.
    """

    model: TwoLayerClassifier
    loss: Float[Array, ""]
    time: Float[Array, ""]
    clock: Float[Array, ""]
    steps: Int[Array, ""]
    status: Status
    target_loss: Float[Array, ""]
    trajectory: ClassifierTrajectory | None

    @property
    def converged(self):
        return self.status == Status.converged


class ClassifierReducedDynamics(eqx.Module):
    """The reduced ODE described in the module docstring; state ``{"c", "t", ["a"], ["b"]}``."""

    initial: TwoLayerClassifier
    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    gram: Float[Array, "n n"]
    pre0: Float[Array, "m n"]
    loss_fn: AbstractLoss
    clock: Clock = eqx.field(static=True)
    reduced: bool = eqx.field(static=True)

    def __init__(self, initial, X, y, loss_fn, clock):
        self.initial, self.X, self.y, self.loss_fn, self.clock = initial, X, y, loss_fn, clock
        # With more examples than dimensions (n > d) the span coordinates C cost m·n² per step
        # instead of m·n·d: then integrate W itself ("c" holds W − W(0), Gram unused).
        self.reduced = X.shape[0] <= X.shape[1]
        self.gram = X @ X.T
        self.pre0 = initial.first @ X.T

    def initial_state(self):
        shape = self.pre0.shape if self.reduced else self.initial.first.shape
        state = {"c": jnp.zeros(shape, dtype=self.X.dtype), "t": jnp.zeros((), self.X.dtype)}
        if self.initial.train_second:
            state["a"] = self.initial.second
        if self.initial.bias is not None:
            state["b"] = self.initial.bias
        return state

    def _trained(self, state):
        a = state.get("a", jax.lax.stop_gradient(self.initial.second))
        b = state.get("b", None)
        return state["c"], a, b

    def _pre(self, c, b):
        pre = self.pre0 + (c @ self.gram if self.reduced else c @ self.X.T)
        return pre if b is None else pre + b[:, None]

    def _loss_of_pre(self, pre, a):
        outputs = a @ leaky_relu(pre, jax.lax.stop_gradient(self.initial.slope))
        return self.loss_fn(outputs, self.y)

    def loss(self, state):
        c, a, b = self._trained(state)
        return self._loss_of_pre(self._pre(c, b), a)

    def model(self, state) -> TwoLayerClassifier:
        c, a, b = self._trained(state)
        shift = c @ self.X if self.reduced else c
        return TwoLayerClassifier(first=self.initial.first + shift, second=a, bias=b,
                                  slope=self.initial.slope,
                                  train_second=self.initial.train_second)

    def vector_field(self, clock, state, args):
        c, a, b = self._trained(state)
        value, (d_pre, d_a) = jax.value_and_grad(self._loss_of_pre, argnums=(0, 1))(
            self._pre(c, b), a)
        # D = ∂L/∂P: dC/dt = −D, ∇_W L = D X, ∇_b L = D 1, so ‖∇_θ L‖² = tr(D G Dᵀ) + ….
        if self.reduced:
            grads = {"c": d_pre}
            sq = jnp.sum((d_pre @ self.gram) * d_pre)
        else:
            grads = {"c": d_pre @ self.X}
            sq = jnp.sum(grads["c"] ** 2)
        if "a" in state:
            grads["a"] = d_a
            sq = sq + jnp.sum(d_a**2)
        if "b" in state:
            grads["b"] = jnp.sum(d_pre, axis=1)
            sq = sq + jnp.sum(grads["b"] ** 2)
        if self.clock == "time":
            g = jnp.ones_like(value)
        elif self.clock == "warped":
            g = 1.0 / value
        else:
            g = value / sq
        out = {k: -g * v for k, v in grads.items()}
        out["t"] = g
        return out


@eqx.filter_jit
def _solve(dynamics, *, solver, rtol, atol, target_loss, c_max, save_at, num_save, max_steps,
           throw):
    state0 = dynamics.initial_state()
    loss0 = dynamics.loss(state0)
    if dynamics.clock == "log-loss":
        c0 = -jnp.log(loss0)
        c1 = -jnp.log(target_loss) + 1.0  # the event ends the solve; +1 guards drift of s vs −log L
    else:
        c0 = jnp.zeros_like(loss0)
        c1 = c_max
    if save_at is None:
        if dynamics.clock == "log-loss":
            save_at = jnp.linspace(0.0, 1.0, num_save) * (-jnp.log(target_loss) - c0) + c0
        else:
            save_at = jnp.linspace(0.0, 1.0, num_save) * c_max
    save_at = jnp.clip(save_at, c0, c1)

    def stop(c, state, args, **kwargs):
        value = dynamics.loss(state)
        return (value <= target_loss) | ~jnp.isfinite(value)

    sol = dfx.diffeqsolve(
        dfx.ODETerm(dynamics.vector_field), solver, t0=c0, t1=c1, dt0=None, y0=state0,
        stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol), event=dfx.Event(stop),
        saveat=dfx.SaveAt(subs=[dfx.SubSaveAt(t1=True), dfx.SubSaveAt(ts=save_at)]),
        max_steps=max_steps, throw=False)
    final = jax.tree_util.tree_map(lambda x: x[-1], sol.ys[0])
    loss = dynamics.loss(final)
    saved = sol.ys[1]
    trajectory = ClassifierTrajectory(
        clock=jnp.where(jnp.isfinite(saved["t"]), sol.ts[1], jnp.inf), time=saved["t"],
        loss=jax.vmap(dynamics.loss)(saved), models=jax.vmap(dynamics.model)(saved))
    out = ClassificationSolution(
        model=dynamics.model(final), loss=loss, time=final["t"], clock=sol.ts[0][-1],
        steps=sol.stats["num_accepted_steps"], status=status_from_diffrax(sol.result, loss),
        target_loss=target_loss, trajectory=trajectory)
    if throw:
        out = eqx.error_if(out, out.status != Status.converged,
                           "classification_flow: the flow did not reach the target loss (see "
                           "ClassificationSolution.status; pass throw=False to get it anyway).")
    return out


def classification_flow(
    model: TwoLayerClassifier, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    loss: AbstractLoss = LogisticLoss(), target_loss: Float[ArrayLike, ""] = 1e-6,
    clock: Clock = "log-loss", save_at: Float[ArrayLike, " T"] | None = None, num_save: int = 64,
    rtol: Float[ArrayLike, ""] = 1e-6, atol: Float[ArrayLike, ""] = 1e-8,
    solver: dfx.AbstractAdaptiveSolver = dfx.Tsit5(), max_steps: int = 100_000,
    clock_max: Float[ArrayLike, ""] = 1e12, throw: bool = True,
) -> ClassificationSolution:
    """Gradient flow of a two-layer classifier until ``L ≤ target_loss`` (THEORY §4).

    Exact reduced ODE on ``W(t) − W(0) ∈ span{xᵢ}`` (module docstring), integrated with an adaptive
    Diffrax solver in float64 in the chosen `clock`; the real time t is integrated alongside.

    **Arguments:**
    - `model`: the initialization (`TwoLayerClassifier`); `X` (n, d), `y` (n,) with labels ±1.
    - `loss`: `LogisticLoss()` or `ExponentialLoss()` (mean over examples).
    - `target_loss`: stop when the loss reaches it (1e-3 … 1e-8 are typical; the norm then is
      ~log(1/target)/margin).
    - `clock`: ``"log-loss"`` (integration variable s = −log L), ``"warped"`` (τ with
      ``dt/dτ = 1/L``) or ``"time"`` (real time).
    - `save_at`: increasing values of the clock at which to save the model (for ``"log-loss"``:
      ``−log`` of the loss levels). Default: `num_save` points evenly spaced from the start to the
      end for the log-loss clock, and from 0 to `clock_max` for the others (pass `save_at` then).
    - `rtol`, `atol`, `solver`, `max_steps`: the ODE solve; `clock_max` bounds the clock for
      ``"warped"``/``"time"``. Running out gives `Status.budget_exhausted`.
    - `throw`: raise unless the target was reached.

    The ReLU/leaky-ReLU vector field jumps where a pre-activation changes sign; the adaptive
    controller shrinks its step there, so the defaults are moderate (rtol 1e-6: on the seed
    mixture the final stable rank of leaky-ReLU runs agrees with rtol 1e-8 to 1e-4 relative).
    Where a ReLU pre-activation is pushed onto 0 from both sides (a Filippov sliding mode) the
    explicit solver chatters and the step count grows ~1/rtol (seed mixture, ReLU: ~1.2e4 steps
    at rtol 1e-6, ~1.2e5 at 1e-7, final stable rank 2.49 vs 2.55); gradient descent is the
    cheaper reference there.
    Everything in `model` and the tolerances are traced, so a vmapped σ-sweep compiles once.
    """
    if not isinstance(model, TwoLayerClassifier):
        raise ValueError(f"model must be a TwoLayerClassifier; got {type(model).__name__}.")
    if clock not in _CLOCKS:
        raise ValueError(f"clock must be one of {_CLOCKS}; got {clock!r}.")
    if not isinstance(loss, AbstractLoss):
        raise ValueError("loss must be an ibflow loss, e.g. LogisticLoss().")
    X, y = _checks.data(X, y)
    if model.first.shape[-1] != X.shape[1]:
        raise ValueError(f"the model has input dimension {model.first.shape[-1]} but X has "
                         f"{X.shape[1]} columns.")
    if not _checks.is_traced(y) and not bool(jnp.all(jnp.abs(y) == 1)):
        raise ValueError("classification labels y must be -1 or +1.")
    if save_at is not None:
        save_at = jnp.asarray(save_at, dtype=float)
        if save_at.ndim != 1:
            raise ValueError("save_at must be a 1-d array of increasing clock values.")
    target_loss = _checks.positive(jnp.asarray(target_loss, dtype=float), "target_loss")
    dynamics = ClassifierReducedDynamics(model, X, y, loss, clock)
    return _solve(dynamics, solver=solver, rtol=jnp.asarray(rtol, dtype=float),
                  atol=jnp.asarray(atol, dtype=float), target_loss=target_loss,
                  c_max=jnp.asarray(clock_max, dtype=float), save_at=save_at,
                  num_save=int(num_save), max_steps=int(max_steps), throw=throw)
