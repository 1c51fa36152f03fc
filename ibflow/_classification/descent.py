"""Full-batch gradient descent on a `TwoLayerClassifier` with Optax, as the discrete counterpart
of `classification_flow` ([THEORY §4.0][theory-4-0]: the seed trains with GD, step 1e-4, 5000
epochs)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._discrete import DescentResult, descent_loop, descent_result
from .._losses import AbstractLoss, LogisticLoss
from .._models.base import AbstractModel
from .._solution import Trajectory


@eqx.filter_jit
def _descend(model, X, y, loss_fn, learning_rate, num_saves, save_every):
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_of(p):
        return loss_fn(jax.vmap(eqx.combine(p, static))(X), y)

    run = descent_loop(loss_of, params, optax.sgd(learning_rate),
                       num_steps=num_saves * save_every, save_every=save_every)
    saved = jax.tree_util.tree_map(lambda p0, p: jnp.concatenate([p0[None], p]), params,
                                   run.saved)
    steps = save_every * jnp.arange(num_saves + 1, dtype=float)
    final = loss_of(run.params)
    losses = jnp.concatenate([run.losses[::save_every], final[None]])
    trajectory = Trajectory(ts=steps, time=learning_rate * steps, loss=losses,
                            models=eqx.combine(saved, static))
    return descent_result(run, final, static, None, trajectory)


def gradient_descent(
    model: AbstractModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    learning_rate: Float[ArrayLike, ""] = 1e-4, num_steps: int = 5000, save_every: int = 100,
    loss: AbstractLoss = LogisticLoss(),
) -> DescentResult:
    """Full-batch GD ``θ_{k+1} = θ_k − η ∇L(θ_k)`` (``optax.sgd(η)``) for `num_steps` steps.

    Returns a `DescentResult` (the type `descend` returns; status ``budget_exhausted``, or
    ``nonfinite``: GD here has no target) whose `trajectory` holds the models at steps
    ``0, save_every, 2·save_every, …`` (`num_steps` must be a multiple of `save_every`), with
    ``clock = k`` and ``time = k·η``: the gradient-flow time GD approximates (first-order
    error ``O(η)`` per unit time). Fixed leaves (the untrained second layer, the slope) have zero
    gradient and stay put. `learning_rate` is traced (a sweep over η
    compiles once); the seed's Gaussian-mixture run is η = 1e-4, 5000 steps.
    """
    if not isinstance(model, AbstractModel):
        raise ValueError(f"model must be an ibflow model (e.g. TwoLayerClassifier); got "
                         f"{type(model).__name__}.")
    X, y = _checks.data(X, y)
    num_steps, save_every = _checks.width(num_steps, "num_steps"), _checks.width(save_every,
                                                                                  "save_every")
    if num_steps % save_every:
        raise ValueError(f"num_steps={num_steps} must be a multiple of save_every={save_every}.")
    learning_rate = _checks.positive(_checks.as_array(learning_rate, float), "learning_rate")
    return _descend(model, X, y, loss, learning_rate, num_steps // save_every, save_every)
