"""``optimize_shape``: learn a per-coordinate initialization shape of the diagonal net by
gradient descent (Optax) on the validation error of the flow's limit point (THEORY [AZ-7.1],
[AZ-T1]), with exact implicit gradients."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Bool, Float

from .. import _checks
from .._models._init import checked_scale_shape
from .._models.diagonal import DiagonalNet
from .limit import limit_point


class ShapeOptimization(eqx.Module):
    """Result of `optimize_shape`.

    **Fields:**
    - `shape`: (d,) the learned per-coordinate shape s ∈ (−1, 1) (the iterate with the lowest
      validation error; only s² matters, THEORY [AZ-7.1]).
    - `predictor`: (d,) the limit point of gradient flow from that initialization.
    - `validation_error`: the validation MSE of `predictor`.
    - `history`: (steps + 1,) validation error of the limit at every iterate (the last entry
      is the final iterate). `shapes`: (steps + 1, d) the iterates.
    - `converged`: the exact minimizer converged at every iterate (if not, the gradients of
      that step are not those of the limit).
    """

    shape: Float[Array, " d"]
    predictor: Float[Array, " d"]
    validation_error: Float[Array, ""]
    history: Float[Array, " T"]
    shapes: Float[Array, "T d"]
    converged: Bool[Array, ""]


def _validation_error(w, X_val, y_val):
    return jnp.mean((X_val @ w - y_val) ** 2)


@eqx.filter_jit
def _optimize(scale, theta0, X, y, X_val, y_val, optimizer, steps):
    def limit(theta):
        model = DiagonalNet.from_scale_shape(scale, jnp.tanh(theta))
        lim = limit_point(model, X, y, throw=False)
        return _validation_error(lim.predictor, X_val, y_val), lim

    value_and_grad = jax.value_and_grad(limit, has_aux=True)

    def step(carry, _):
        theta, state = carry
        (value, lim), grad = value_and_grad(theta)
        # Optax mixes its int32 step count with floats (Adam's bias correction), which strict
        # dtype promotion rejects; the promotion is harmless here.
        with jax.numpy_dtype_promotion("standard"):
            updates, state = optimizer.update(grad, state, theta)
        return (optax.apply_updates(theta, updates), state), (value, theta, lim.converged)

    with jax.numpy_dtype_promotion("standard"):
        state0 = optimizer.init(theta0)
    (theta, _), (values, thetas, ok) = jax.lax.scan(step, (theta0, state0), None, length=steps)
    last_value, last = limit(theta)
    values = jnp.concatenate([values, last_value[None]])
    thetas = jnp.concatenate([thetas, theta[None]])
    ok = jnp.all(ok) & last.converged
    best = jnp.argmin(values)
    shape = jnp.tanh(thetas[best])
    _, best_limit = limit(thetas[best])
    return ShapeOptimization(shape=shape, predictor=best_limit.predictor,
                             validation_error=values[best], history=values,
                             shapes=jnp.tanh(thetas), converged=ok)


def optimize_shape(
    X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], X_val: Float[ArrayLike, "m d"],
    y_val: Float[ArrayLike, " m"], *, scale: Float[ArrayLike, "*d"],
    init_shape: Float[ArrayLike, "*d"] = 0.5, steps: int = 100,
    optimizer: optax.GradientTransformation | None = None,
) -> ShapeOptimization:
    """Per-coordinate shapes ``s ∈ (−1, 1)ᵈ`` of an unbiased diagonal net (scale `scale`)
    whose gradient-flow limit on ``(X, y)`` has the smallest validation error
    ``mean((X_val w − y_val)²)``.

    The limit is ``argmin Q_k s.t. Xw = y`` with ``kᵢ = 4αᵢ(1 + sᵢ²)/(1 − sᵢ²)`` (THEORY
    [AZ-T1], [AZ-7.1]); the gradient of the validation error with respect to s is exact
    (implicit differentiation of the KKT system, `ibflow.differentiable_minimize`). The
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
