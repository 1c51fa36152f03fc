"""`certify`: what a flow's end point is — a minimum, a saddle or not stationary at all
([THEORY §8.3][theory-8-3]).

For smooth models: the loss, the gradient's norm and the extreme eigenvalues of the loss's
Hessian in the trained parameters. Dense (``jax.hessian`` and ``eigh``) up to `dense_max`
parameters; above, Lanczos with full reorthogonalization on Hessian–vector products (one JVP of
the gradient each), so no p × p matrix is formed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from . import _checks
from ._losses import AbstractLoss, SquareLoss
from ._result import AbstractResult
from ._status import Status


class Certificate(AbstractResult):
    """What the end point of a flow is. Every field is an array (a batch under ``vmap``).

    - `loss`: the training loss L(θ).
    - `gradient_norm`: ``‖∇L(θ)‖₂`` over all trained parameters.
    - `relative_gradient`: ``‖∇L‖ / (max(|λ|) · ‖θ‖)``: the size of a Newton step to the
      nearby critical point relative to ``‖θ‖`` when the Hessian is well conditioned; scale-free,
      ~1e-16 at a stationary point to round-off.
    - `hessian_min`, `hessian_max`: the smallest and largest eigenvalues of ``∇²L(θ)`` (exact from
      ``eigh`` at small p; Lanczos Ritz values above, which approach the extremes from inside).
    - `stationary`: ``relative_gradient ≤ gradient_tol``.
    - `minimum`: stationary and ``hessian_min ≥ −curvature_tol · max(|λ|)``: a (local, possibly
      degenerate) minimum. Flat directions (λ ≈ 0, e.g. the rescaling symmetries of homogeneous
      nets) are allowed: they are not descent directions at second order.
    - `saddle`: stationary and ``hessian_min < −curvature_tol · max(|λ|)``: a direction of
      negative curvature, which gradient flow leaves unless it starts exactly off it (e.g. a
      symmetric start that keeps the flow in a symmetric subspace).
    - `status`: of the certificate's own computation (the shared result base): `converged`
      when every number above is finite, else `nonfinite`. What the point *is* is `verdict`.
    """

    loss: Float[Array, ""]
    gradient_norm: Float[Array, ""]
    relative_gradient: Float[Array, ""]
    hessian_min: Float[Array, ""]
    hessian_max: Float[Array, ""]
    stationary: Bool[Array, ""]
    minimum: Bool[Array, ""]
    saddle: Bool[Array, ""]
    status: Status

    @property
    def verdict(self) -> str:
        """``"minimum"``, ``"saddle"`` or ``"not stationary"`` (a concrete certificate only)."""
        if bool(self.minimum):
            return "minimum"
        return "saddle" if bool(self.saddle) else "not stationary"


def lanczos_extremes(matvec, v0: Float[Array, " p"], steps: int
                     ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The smallest and largest Ritz values of the symmetric operator `matvec` after `steps`
    Lanczos steps from `v0` (at most p), with full reorthogonalization (Gram–Schmidt twice
    against every earlier vector: no spurious copies of converged Ritz values). On an invariant
    subspace (a residual at round-off) it stops, and the Ritz values are eigenvalues."""
    p = v0.shape[0]
    steps = min(steps, p)
    eps = jnp.finfo(v0.dtype).eps
    basis = jnp.zeros((steps, p), v0.dtype).at[0].set(v0 / jnp.linalg.norm(v0))
    zeros = jnp.zeros(steps, v0.dtype)

    def step(j, carry):
        basis, alpha, beta, scale, count, alive = carry

        def advance():
            w = matvec(basis[j])
            a = basis[j] @ w
            q = jnp.where((jnp.arange(steps) <= j)[:, None], basis, 0.0)
            r = w - a * basis[j]
            for _ in range(2):
                r = r - q.T @ (q @ r)
            b = jnp.linalg.norm(r)
            grown = jnp.maximum(scale, jnp.abs(a) + b)
            go = b > 1e3 * eps * grown
            following = jnp.minimum(j + 1, steps - 1)
            nxt = jnp.where(go & (j + 1 < steps), r / jnp.where(b > 0, b, 1.0),
                            basis[following])
            return (basis.at[following].set(nxt), alpha.at[j].set(a),
                    beta.at[j].set(jnp.where(go, b, 0.0)), grown, count + 1, go)

        return jax.lax.cond(alive, advance, lambda: carry)

    _, alpha, beta, _, count, _ = jax.lax.fori_loop(
        0, steps, step, (basis, zeros, zeros, jnp.zeros((), v0.dtype), jnp.array(0),
                         jnp.array(True)))
    # The leading count × count block of the tridiagonal matrix; the padding rows hold copies
    # of alpha[0], decoupled: a diagonal entry lies between a symmetric matrix's extreme
    # eigenvalues, so the copies change neither the smallest nor the largest.
    inside = jnp.arange(steps) < count
    diag = jnp.where(inside, alpha, alpha[0])
    off = jnp.where(jnp.arange(steps - 1) < count - 1, beta[:-1], 0.0)
    values = jnp.linalg.eigvalsh(jnp.diag(diag) + jnp.diag(off, 1) + jnp.diag(off, -1))
    return values[0], values[-1]


@eqx.filter_jit
def certify(
    model: eqx.Module, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    loss: AbstractLoss = SquareLoss(), gradient_tol: float = 1e-8, curvature_tol: float = 1e-8,
    dense_max: int = 2000, lanczos_steps: int = 60, key: PRNGKeyArray | None = None,
) -> Certificate:
    """Certify what ``model`` (e.g. ``integrate(...).model``) is for the loss on ``(X, y)``:
    see `Certificate` for each number's meaning and the tests behind `minimum` and `saddle`.

    **Arguments:**
    - `model`: any Equinox module mapping one example to a scalar; its inexact array leaves
      are the parameters θ. `X` (n, d), `y` (n,): the data; `loss`: as for `integrate`.
    - `gradient_tol`: the largest `relative_gradient` called stationary (default 1e-8).
    - `curvature_tol`: negative curvature below ``curvature_tol · max|λ|`` is read as round-off
      (flat), above it as a saddle's descent direction (default 1e-8).
    - `dense_max` (a Python int): up to this many parameters the Hessian is formed and
      diagonalized; above, `lanczos_steps` Lanczos steps on Hessian–vector products from a
      random start (`key`, default ``PRNGKey(0)``).
    """
    if not isinstance(loss, AbstractLoss):
        raise ValueError(f"loss must be an ibflow loss (e.g. SquareLoss()); got "
                         f"{type(loss).__name__}.")
    for name, value in (("dense_max", dense_max), ("lanczos_steps", lanczos_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a Python int >= 1; got {value!r}.")
    X = jnp.asarray(X)
    y = jnp.asarray(y)
    if X.ndim != 2 or y.shape != X.shape[:1]:
        raise ValueError(f"X must be (n, d) and y (n,); got {X.shape} and {y.shape}.")
    gradient_tol = _checks.as_array(gradient_tol, float)
    curvature_tol = _checks.as_array(curvature_tol, float)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    theta, unravel = ravel_pytree(params)

    def objective(t):
        m = eqx.combine(unravel(t), static)
        return loss(jax.vmap(m)(X), y)

    value, grad = jax.value_and_grad(objective)(theta)
    if theta.shape[0] <= dense_max:
        eigenvalues = jnp.linalg.eigvalsh(jax.hessian(objective)(theta))
        low, high = eigenvalues[0], eigenvalues[-1]
    else:
        _, hvp = jax.linearize(jax.grad(objective), theta)
        v0 = jax.random.normal(jax.random.PRNGKey(0) if key is None else key, theta.shape,
                               theta.dtype)
        low, high = lanczos_extremes(hvp, v0, lanczos_steps)
    size = jnp.maximum(jnp.abs(low), jnp.abs(high))
    gradient_norm = jnp.linalg.norm(grad)
    tiny = jnp.finfo(theta.dtype).tiny
    relative = gradient_norm / jnp.maximum(size * jnp.linalg.norm(theta), tiny)
    stationary = relative <= gradient_tol
    negative = low < -curvature_tol * size
    finite = jnp.isfinite(jnp.stack([value, gradient_norm, relative, low, high])).all()
    return Certificate(loss=value, gradient_norm=gradient_norm, relative_gradient=relative,
                       hessian_min=low, hessian_max=high, stationary=stationary,
                       minimum=stationary & ~negative, saddle=stationary & negative,
                       status=Status.where(finite, Status.converged, Status.nonfinite))


__all__ = ["Certificate", "certify", "lanczos_extremes"]
