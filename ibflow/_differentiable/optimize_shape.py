"""``optimize_shape``: learn a per-coordinate initialization shape of the diagonal net by
gradient descent (Optax) on the validation error of the flow's limit point
([THEORY AZ-7.1][theory-az-7-1], [AZ-T1][theory-az-t1]), with exact implicit gradients."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._discrete import descent_loop
from .._models._init import checked_scale_shape
from .._models.diagonal import DiagonalNet
from .._result import AbstractResult
from .._status import Status
from .limit import limit_point


class ShapeOptimization(AbstractResult):
    """Result of `optimize_shape`.

    **Fields:**
    - `shape`: (d,) the learned per-coordinate shape s ∈ (−1, 1) (the iterate with the lowest
      validation error; only s² matters, [THEORY AZ-7.1][theory-az-7-1]).
    - `predictor`: (d,) the limit point of gradient flow from that initialization.
    - `validation_error`: the validation MSE of `predictor`.
    - `history`: (steps + 1,) validation error of the limit at every iterate (the last entry
      is the final iterate). `shapes`: (steps + 1, d) the iterates.
    - `status`: ``Status.converged`` if the exact minimizer converged at every iterate (if not,
      the gradients of that step are not those of the limit); otherwise the status of the first
      iterate whose minimizer did not converge, or ``Status.nonfinite`` if a validation error is
      not finite. ``converged`` tests it.
    """

    shape: Float[Array, " d"]
    predictor: Float[Array, " d"]
    validation_error: Float[Array, ""]
    history: Float[Array, " T"]
    shapes: Float[Array, "T d"]
    status: Status


def _validation_error(w, X_val, y_val):
    return jnp.mean((X_val @ w - y_val) ** 2)


@eqx.filter_jit
def _optimize(scale, theta0, X, y, X_val, y_val, optimizer, steps):
    def limit(theta):
        model = DiagonalNet.from_scale_shape(scale, jnp.tanh(theta))
        lim = limit_point(model, X, y, throw=False)
        return _validation_error(lim.predictor, X_val, y_val), lim

    def loss_of(theta):
        value, lim = limit(theta)
        return value, lim.minimum.status

    run = descent_loop(loss_of, theta0, optimizer, num_steps=steps, save_every=1, has_aux=True)
    last_value, last = limit(run.params)
    values = jnp.concatenate([run.losses, last_value[None]])
    thetas = jnp.concatenate([theta0[None], run.saved])
    statuses = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), run.aux,
                                      last.minimum.status)
    # The first iterate whose minimizer did not converge says why (converged if none).
    failed = statuses != Status.converged
    status = jax.tree_util.tree_map(lambda a: a[jnp.argmax(failed)], statuses)
    status = Status.where(jnp.all(jnp.isfinite(values)), status, Status.nonfinite)
    best = jnp.argmin(values)
    _, best_limit = limit(thetas[best])
    return ShapeOptimization(shape=jnp.tanh(thetas[best]), predictor=best_limit.predictor,
                             validation_error=values[best], history=values,
                             shapes=jnp.tanh(thetas), status=status)


def optimize_shape(
    X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], X_val: Float[ArrayLike, "m d"],
    y_val: Float[ArrayLike, " m"], *, scale: Float[ArrayLike, "*d"],
    init_shape: Float[ArrayLike, "*d"] = 0.5, steps: int = 100,
    optimizer: optax.GradientTransformation | None = None,
) -> ShapeOptimization:
    """Per-coordinate shapes ``s ∈ (−1, 1)ᵈ`` of an unbiased diagonal net (scale `scale`)
    whose gradient-flow limit on ``(X, y)`` has the smallest validation error
    ``mean((X_val w − y_val)²)``.

    The limit is ``argmin Q_k s.t. Xw = y`` with ``kᵢ = 4αᵢ(1 + sᵢ²)/(1 − sᵢ²)``
    ([THEORY AZ-T1][theory-az-t1], [AZ-7.1][theory-az-7-1]); the gradient of the validation error
    with respect to s is exact (implicit differentiation of the KKT system,
    `ibflow.differentiable_minimize`). The
    shapes are parametrized as ``s = tanh(θ)`` and θ is updated by `optimizer` (default
    ``optax.adam(0.05)``) for `steps` steps, all inside one compiled ``lax.scan``. Jittable
    and vmappable over problems (``eqx.filter_vmap`` over the arrays; the optimizer and
    `steps` are static).

    Balanced ``s = 0`` is a stationary point of every objective (only s² enters ``k``), so
    start elsewhere: `init_shape` = 0.5 by default, or the best uniform shape of a sweep.
    Since ``k ≥ 4α`` with equality at s = 0, shapes can only make a coordinate *lazier*
    (towards the weighted-ℓ2 regime): the optimizer learns which coordinates to release.

    **Arguments:**
    - `X` (n, d), `y` (n,): training data; `X_val` (m, d), `y_val` (m,): validation data.
    - `scale`: α > 0, scalar or (d,). `init_shape`: starting shape, scalar or (d,).
    - `steps`: optimizer steps. `optimizer`: an Optax gradient transformation.

    **Returns:** a `ShapeOptimization` (best iterate by validation error, and the history).
    """
    X, y = _checks.data(X, y)
    X_val, y_val = _checks.data(X_val, y_val)
    n, d = X.shape
    if X_val.shape[1] != d:
        raise ValueError(f"X_val has {X_val.shape[1]} columns but X has {d}.")
    if n > d:
        raise ValueError(f"optimize_shape needs an overparametrized problem (n <= d); got "
                         f"n = {n}, d = {d}.")
    steps = _checks.width(steps, "steps")
    scale, init_shape = checked_scale_shape(scale, init_shape)
    for name, a in (("scale", scale), ("init_shape", init_shape)):
        if a.shape not in ((), (d,)):
            raise ValueError(f"{name} must be a scalar or have shape ({d},); got {a.shape}.")
    scale = jnp.broadcast_to(scale, (d,))
    theta0 = jnp.broadcast_to(jnp.arctanh(init_shape), (d,))
    if optimizer is None:
        optimizer = optax.adam(0.05)
    return _optimize(scale, theta0, X, y, X_val, y_val, optimizer, steps)
