"""Tangent kernel at initialization and the NTK (lazy) limit, [THEORY §2.4][theory-2-4]
[AZ-F][theory-az-f].

In the lazy regime gradient flow behaves like its linearization at the initialization θ₀:
``f(x; θ) ≈ f(x; θ₀) + ∇_θ f(x; θ₀)·(θ − θ₀)``. Gradient flow on the square loss of the linearized
model converges to kernel regression with the tangent kernel ``K(x, x') = ∇_θf(x)·∇_θf(x')`` at θ₀:

    f_∞(x) = f₀(x) + K(x, X) K(X, X)⁻¹ (y − f₀(X)).

For a model linear in its input, ``K(x, x') = xᵀ M₀ x'`` with ``M₀ = J Jᵀ`` (``J = ∂w̃/∂θ`` at θ₀,
`predictor_inverse_metric`), and the limit is the predictor

    w̃_NTK = w̃₀ + M₀ Xᵀ (X M₀ Xᵀ)⁻¹ (y − X w̃₀),

the minimiser of the RKHS (Mahalanobis) norm ``‖w̃ − w̃₀‖_{M₀⁻¹}`` over ``Xw̃ = y``. For the single
neuron ``M₀ = a₀² I + w₀w₀ᵀ``, for ``m`` neurons ``(Σ aᵢ²) I + W₀ᵀW₀``, for the diagonal net
``diag(sqrt(4w₀² + k²))`` (= ``diag(k)``, the weighted ℓ2 of [§2.3][theory-2-3], for an unbiased
start).

When is the flow's limit close to it? When the displacement from ``w̃₀`` is small relative to the
initialization scale: for a single neuron with targets given relative to the initial outputs
(``y = X w̃₀ + r``) the error falls like 1/α; with fixed ``y = O(1)`` and a biased start it does
*not* ([THEORY §2.4][theory-2-4] caveat; the tests check both cases).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._models.base import AbstractLinearModel, AbstractModel
from .hessian_map import _flat_parameters, _jacobian, predictor_inverse_metric


def _inputs(X, name="X"):
    X = _checks.real_array(X, name, ndim=2)
    X = jnp.asarray(X, dtype=float) if not _checks.is_traced(X) else X
    return _checks.finite(X, name)


def output_jacobian(model: AbstractModel, X: Float[ArrayLike, "n d"]) -> Float[Array, "n p"]:
    """``∂f(x_i; θ)/∂θ`` for every row of ``X``, ``θ`` = the model's inexact array leaves flattened
    (``ravel_pytree`` order). Leaves the model holds fixed (``stop_gradient``) get zero columns."""
    X = _inputs(X)
    flat, rebuild = _flat_parameters(model)
    return _jacobian(lambda theta: jax.vmap(rebuild(theta))(X), flat, X.shape[0])


@eqx.filter_jit
def tangent_kernel(
    model: AbstractModel, X: Float[ArrayLike, "n d"], X2: Float[ArrayLike, "m d"] | None = None,
) -> Float[Array, "n m"]:
    """The (empirical) neural tangent kernel of ``model`` at its current parameters, by autodiff:
    ``K_ij = ∇_θ f(x_i) · ∇_θ f(x2_j)`` ([THEORY AZ-F][theory-az-f]). ``X2`` defaults to ``X``.

    For a model linear in its input this is ``X M₀ X2ᵀ`` with ``M₀ = predictor_inverse_metric``.
    """
    J = output_jacobian(model, X)
    J2 = J if X2 is None else output_jacobian(model, X2)
    return J @ J2.T


def _solve_psd(K, r, what: str):
    """``K⁻¹ r`` for a kernel matrix; a non-finite answer (singular ``K``) is an error, not a
    silent wrong number."""
    out = jnp.linalg.solve(K, r)
    return eqx.error_if(out, ~jnp.all(jnp.isfinite(out)),
                        f"{what} is singular: the tangent kernel on X is not invertible "
                        "(duplicate or linearly dependent inputs, or a degenerate initialization).")


@eqx.filter_jit
def ntk_outputs(
    model: AbstractModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"],
    X_eval: Float[ArrayLike, "m d"],
) -> Float[Array, " m"]:
    """Outputs at ``X_eval`` of the kernel-regression (NTK) limit of gradient flow on the square
    loss, from ``model`` taken as the initialization (any model; [THEORY AZ-F][theory-az-f]):
    ``f₀(X_eval) + K(X_eval, X) K(X, X)⁻¹ (y − f₀(X))``. Exact for the linearized model; the
    flow's own limit approaches it in the lazy regime. Needs ``K(X, X)`` invertible (n ≤ p)."""
    X, y = _checks.data(X, y)
    X_eval = _inputs(X_eval, "X_eval")
    if X_eval.shape[1] != X.shape[1]:
        raise ValueError(f"X_eval has {X_eval.shape[1]} features, X has {X.shape[1]}.")
    J, J_eval = output_jacobian(model, X), output_jacobian(model, X_eval)
    f0, f0_eval = jax.vmap(model)(X), jax.vmap(model)(X_eval)
    coef = _solve_psd(J @ J.T, y - f0, "K(X, X)")
    return f0_eval + (J_eval @ J.T) @ coef


def _linear(model) -> AbstractLinearModel:
    if not isinstance(model, AbstractLinearModel):
        raise ValueError(
            f"this needs a model linear in its input (AbstractLinearModel); got "
            f"{type(model).__name__}. For a general model use ntk_outputs(model, X, y, X_eval)."
        )
    return model


@eqx.filter_jit
def ntk_predictor(
    model: AbstractLinearModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"],
) -> Float[Array, " d"]:
    """The NTK-limit predictor of [THEORY AZ-F][theory-az-f] for a model linear in its input,
    ``model`` being the initialization: ``w̃_NTK = w̃₀ + M₀Xᵀ(XM₀Xᵀ)⁻¹(y − Xw̃₀)`` with
    ``M₀ = J Jᵀ`` by autodiff.
    It interpolates ``Xw̃ = y`` and minimises `ntk_rkhs_norm` among interpolants. Shape (d,)."""
    model = _linear(model)
    X, y = _checks.data(X, y)
    w0 = model.predictor()
    if X.shape[1] != w0.shape[0]:
        raise ValueError(
            f"X has {X.shape[1]} features but the model's predictor has {w0.shape[0]}.")
    M0 = predictor_inverse_metric(model)
    MXt = M0 @ X.T
    return w0 + MXt @ _solve_psd(X @ MXt, y - X @ w0, "X M₀ Xᵀ")


@eqx.filter_jit
def ntk_rkhs_norm(
    model: AbstractLinearModel, w: Float[ArrayLike, "*b d"], *, rtol: float = 1e-10,
) -> Float[Array, "*b"]:
    """RKHS norm, for the tangent kernel ``k(x, x') = xᵀM₀x'`` of ``model`` at its parameters, of
    the function ``x ↦ <w − w̃₀, x>``: the Mahalanobis norm ``sqrt((w − w̃₀)ᵀ M₀⁺ (w − w̃₀))``
    ([THEORY AZ-F][theory-az-f]: ``D_Q(w, w̃₀) ≈ (g₀/2) · norm²`` in the lazy regime).

    ``+inf`` when ``w − w̃₀`` has a component (relative size > `rtol`) outside ``range M₀``: such a
    function is not in the RKHS. Broadcasts over leading dimensions of `w`.
    """
    model = _linear(model)
    w0 = model.predictor()
    v = jnp.asarray(w, dtype=float) - w0
    if v.shape[-1] != w0.shape[0]:
        raise ValueError(f"w has {v.shape[-1]} coordinates, the model's predictor {w0.shape[0]}.")
    lam, U = jnp.linalg.eigh(predictor_inverse_metric(model))
    keep = lam > rtol * jnp.max(lam)
    c = v @ U
    inside = jnp.sum(jnp.where(keep, c**2 / jnp.where(keep, lam, 1.0), 0.0), axis=-1)
    outside = jnp.sqrt(jnp.sum(jnp.where(keep, 0.0, c**2), axis=-1))
    scale = jnp.linalg.norm(v, axis=-1)
    return jnp.where(outside > rtol * scale, jnp.inf, jnp.sqrt(inside))
