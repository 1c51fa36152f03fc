"""Finite-step counterparts of the flows, with Optax: gradient descent (``optax.sgd(η)``, the
Euler discretization of `GradientFlow`) and mirror descent (`mirror_descent`), run by `descend`.

For step-size studies: as the step η → 0 (with ``η · steps`` fixed or the loss driven to its
target) the iterates approach the flow's path and limit (first-order discretization error).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float, PyTree

from . import _checks
from ._losses import AbstractLoss, SquareLoss
from ._models.base import AbstractModel
from ._potentials.base import AbstractPotential
from ._potentials.scaling import AbstractScaling, Unscaled


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
    in the mirror coordinates (THEORY §1 [AZ-eq-IMD]); for a model linear in its parameters every
    iterate satisfies ``∇Φ(θ_k) − ∇Φ(θ_0) ∈ range(Xᵀ)``, so its limit is the same Bregman
    projection as the flow's, and the path differs by O(η).
    """
    if not isinstance(potential, AbstractPotential):
        raise ValueError("mirror_descent needs an ibflow potential.")
    learning_rate = jnp.asarray(learning_rate, dtype=float)

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


class DescentResult(eqx.Module):
    """Final model and the loss before each step (``losses[k] = L(θ_k)``, shape (steps,))."""

    model: AbstractModel
    losses: Float[Array, " steps"]


@eqx.filter_jit
def descend(
    model: AbstractModel, X: Float[ArrayLike, "m d"], y: Float[ArrayLike, " m"], *,
    optimizer: optax.GradientTransformation, num_steps: int, loss: AbstractLoss = SquareLoss(),
) -> DescentResult:
    """Run ``num_steps`` full-batch steps of `optimizer` on ``loss`` from ``model``.

    `optimizer` is any Optax transformation: ``optax.sgd(η)`` for gradient descent,
    ``mirror_descent(φ, learning_rate=η)`` for mirror descent. A new optimizer object (e.g. a new
    step size) retraces; the model's arrays and the data do not.

    Only the model's inexact-array leaves are updated (fixed leaves are wrapped in
    ``stop_gradient`` by the models, so their gradients vanish).
    """
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer; got {num_steps!r}.")
    X, y = _checks.data(X, y)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_of(p):
        return loss(jax.vmap(eqx.combine(p, static))(X), y)

    def step(carry, _):
        p, opt_state = carry
        value, grads = jax.value_and_grad(loss_of)(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), value

    (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)), None,
                                       length=num_steps)
    return DescentResult(model=eqx.combine(params, static), losses=losses)
