"""Finite-step counterparts of the flows, with Optax: gradient descent (``optax.sgd(η)``, the
Euler discretization of `GradientFlow`) and mirror descent (`mirror_descent`), run by `descend`.

For step-size studies: as the step η → 0 (with ``η · steps`` fixed or the loss driven to its
target) the iterates approach the flow's path and limit (first-order discretization error).
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from . import _checks
from ._losses import AbstractLoss, SquareLoss
from ._models.base import AbstractModel
from ._potentials.base import AbstractPotential
from ._potentials.scaling import AbstractScaling, Unscaled
from ._result import AbstractResult
from ._solution import Trajectory
from ._status import Status


class MirrorDescentState(NamedTuple):
    initial: PyTree[Array]
    """``θ(0)``, the centre of the separable potential."""


def mirror_descent(
    potential: AbstractPotential, *, learning_rate: Float[ArrayLike, ""],
    scaling: AbstractScaling = Unscaled(),
) -> optax.GradientTransformation:
    """Mirror descent ``∇Φ(θ_{k+1}) = ∇Φ(θ_k) − η ∇L(θ_k)`` with the separable potential of
    `MirrorFlow` (centred at the parameters passed to ``init``), inverted elementwise.

    It is the step-η discretization of ``MirrorFlow(potential, scaling=..., learning_rate=1)``
    in the mirror coordinates ([THEORY §1][theory-1] [AZ-eq-IMD][theory-az-eq-imd]); for a model
    linear in its parameters every iterate satisfies ``∇Φ(θ_k) − ∇Φ(θ_0) ∈ range(Xᵀ)``, so its limit
    is the same Bregman
    projection as the flow's, and the path differs by O(η).
    """
    if not isinstance(potential, AbstractPotential):
        raise ValueError("mirror_descent needs an ibflow potential.")
    learning_rate = jnp.asarray(_checks.real_scalar(learning_rate, "learning_rate", positive=True),
                                dtype=float)

    def init(params):
        return MirrorDescentState(initial=jax.tree_util.tree_map(jnp.asarray, params))

    def update(grads, state, params=None):
        if params is None:
            raise ValueError("mirror_descent needs params: call update(grads, state, params).")

        def one(g, p, p0):
            z = scaling.gradient(potential, p - p0) - learning_rate * g
            return p0 + scaling.inverse_gradient(potential, z) - p

        return jax.tree_util.tree_map(one, grads, params, state.initial), state

    return optax.GradientTransformation(init, update)


class DescentResult(AbstractResult):
    """Result of `descend` and of `gradient_descent` (the discrete counterpart of a `Solution`).

    **Fields:**
    - `model`: the final model.
    - `losses`: (steps,) the loss before each step, ``losses[k] = L(θ_k)``.
    - `loss`: the loss of the final model.
    - `steps`: the steps that moved the model (fewer than `num_steps` when the loss reached
      `target_loss` first; later steps leave it in place).
    - `status`: ``Status.converged`` if a `target_loss` was given and the final loss is at or below
      it; otherwise ``Status.nonfinite`` if the final loss is not finite, else
      ``Status.budget_exhausted`` (a descent without a target has no criterion to meet).
    - `trajectory`: a `Trajectory` of the models at the saved steps (`gradient_descent`), or
      None (`descend`).
    """

    model: AbstractModel
    losses: Float[Array, " steps"]
    loss: Float[Array, ""]
    steps: Int[Array, ""]
    status: Status
    trajectory: Trajectory | None = None


class _Descent(eqx.Module):
    """Output of `descent_loop`."""

    params: PyTree[Array]
    losses: Float[Array, " steps"]
    saved: PyTree[Array]
    steps: Int[Array, ""]
    aux: PyTree[Array]


def descent_loop(
    loss_of: Callable[[PyTree[Array]], Float[Array, ""]], params: PyTree[Array],
    optimizer: optax.GradientTransformation, *, num_steps: int, save_every: int | None = None,
    target_loss: Float[Array, ""] | None = None, has_aux: bool = False,
) -> _Descent:
    """The one full-batch Optax loop behind `descend`, `mirror_descent` runs and
    `gradient_descent`: ``num_steps`` steps of ``optimizer`` on ``loss_of(params)`` in a
    ``lax.scan`` (traced once, whatever the numbers in ``params`` and the data).

    Returns the final parameters, the loss before each step (shape ``(num_steps,)``), the
    parameters after every ``save_every`` steps (leading axis ``num_steps // save_every``;
    ``num_steps`` must be a multiple of ``save_every``; default: only the end) and the number of
    steps that moved the parameters. With a ``target_loss``, a step taken at a loss at or below it
    leaves the parameters and the optimizer state unchanged (the descent has stopped). With
    ``has_aux``, ``loss_of`` returns ``(loss, aux)`` and the result stacks ``aux`` of every step.

    Optax mixes its int32 step counts with floats (e.g. Adam's bias correction), which strict
    dtype promotion rejects; the optimizer runs under standard promotion, which is harmless here.
    """
    save_every = num_steps if save_every is None else save_every
    if num_steps % save_every:
        raise ValueError(f"num_steps={num_steps} must be a multiple of save_every={save_every}.")

    def step(carry, _):
        p, opt_state, taken = carry
        (value, aux), grads = jax.value_and_grad(
            loss_of if has_aux else lambda q: (loss_of(q), None), has_aux=True)(p)
        with jax.numpy_dtype_promotion("standard"):
            updates, new_state = optimizer.update(grads, opt_state, p)
        new_p = optax.apply_updates(p, updates)
        if target_loss is not None:
            stop = value <= target_loss
            keep = lambda old, new: jax.tree_util.tree_map(
                lambda a, b: jnp.where(stop, a, b) if eqx.is_array(a) else b, old, new)
            new_p, new_state = keep(p, new_p), keep(opt_state, new_state)
            taken = taken + jnp.where(stop, 0, 1)
        else:
            taken = taken + 1
        return (new_p, new_state, taken), (value, aux)

    def block(carry, _):
        carry, (values, aux) = jax.lax.scan(step, carry, None, length=save_every)
        return carry, (values, aux, carry[0])

    with jax.numpy_dtype_promotion("standard"):
        carry = (params, optimizer.init(params), jnp.array(0, dtype=int))
    (params, _, taken), (losses, aux, saved) = jax.lax.scan(block, carry, None,
                                                            length=num_steps // save_every)
    flat = lambda a: a.reshape(num_steps, *a.shape[2:])
    return _Descent(params=params, losses=flat(losses), saved=saved, steps=taken,
                    aux=jax.tree_util.tree_map(flat, aux))


def descend(
    model: AbstractModel, X: Float[ArrayLike, "m d"], y: Float[ArrayLike, " m"], *,
    optimizer: optax.GradientTransformation, num_steps: int, loss: AbstractLoss = SquareLoss(),
    target_loss: Float[ArrayLike, ""] | None = None,
) -> DescentResult:
    """Run ``num_steps`` full-batch steps of `optimizer` on ``loss`` from ``model``.

    `optimizer` is any Optax transformation: ``optax.sgd(η)`` for gradient descent,
    ``mirror_descent(φ, learning_rate=η)`` for mirror descent. A new optimizer object (e.g. a new
    step size) retraces; the model's arrays, the data and `target_loss` do not.

    With `target_loss` (≥ 0) the descent stops moving once the loss is at or below it, and its
    status says whether it got there (see `DescentResult`).

    Only the model's inexact-array leaves are updated (fixed leaves are wrapped in
    ``stop_gradient`` by the models, so their gradients vanish).
    """
    num_steps = _checks.width(num_steps, "num_steps")
    X, y = _checks.data(X, y)
    if isinstance(target_loss, int | float) and not (0 <= target_loss < float("inf")):
        raise ValueError(f"target_loss must be finite and >= 0; got {target_loss!r}.")
    if target_loss is not None:
        target_loss = jnp.asarray(target_loss, dtype=float)  # an array: sweeping it never retraces
    return _descend(model, X, y, optimizer, num_steps, loss, target_loss)


@eqx.filter_jit
def _descend(model, X, y, optimizer, num_steps, loss, target_loss):
    if target_loss is not None:
        target_loss = eqx.error_if(target_loss, ~(jnp.isfinite(target_loss) & (target_loss >= 0)),
                                   "target_loss must be finite and >= 0.")
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_of(p):
        return loss(jax.vmap(eqx.combine(p, static))(X), y)

    run = descent_loop(loss_of, params, optimizer, num_steps=num_steps, target_loss=target_loss)
    return descent_result(run, loss_of(run.params), static, target_loss)


def descent_result(run: _Descent, final: Float[Array, ""], static, target_loss,
                   trajectory: Trajectory | None = None) -> DescentResult:
    """The `DescentResult` of a `descent_loop` run, its final loss and the model's static part."""
    status = Status.budget_exhausted if target_loss is None else Status.where(
        final <= target_loss, Status.converged, Status.budget_exhausted)
    status = Status.where(jnp.isfinite(final), status, Status.nonfinite)
    return DescentResult(model=eqx.combine(run.params, static), losses=run.losses, loss=final,
                         steps=run.steps, status=status, trajectory=trajectory)
