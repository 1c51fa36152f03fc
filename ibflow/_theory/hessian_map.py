"""The Hessian-map test of [THEORY §2.1][theory-2-1] [AZ-HMC][theory-az-hmc] and the predictor-space
metric of a model.

Gradient flow on the parameters θ of a model that is linear in its predictor ``w̃(θ)`` moves the
predictor by ``dw̃/dt = −J Jᵀ ∇L(w̃)`` with ``J = ∂w̃/∂θ`` ([AZ-eq-metric][theory-az-eq-metric]).
When the conserved quantities make ``M = J Jᵀ`` a function of ``w̃`` alone, the flow is a mirror
flow (an IMD) iff ``H = M⁻¹`` is a Hessian, i.e. iff ``∂ₖH_ij`` is symmetric in ``(j, k)``
([AZ-HMC][theory-az-hmc]); it is a *warped* mirror flow iff ``g(w̃) H(w̃)`` is a Hessian for some
scalar ``g > 0`` ([AZ-WARP][theory-az-warp]).

This module gives

- `predictor_inverse_metric`: ``J Jᵀ`` of any model by autodiff, at its current parameters;
- `inverse_metric_field`: the same matrix written as a function of ``w̃`` on the model's invariant
  manifold (`DiagonalInverseMetric` for the diagonal net, [§2.3][theory-2-3]; `NeuronInverseMetric`
  for a single hidden neuron, [§2.4][theory-2-4]), with the warp ``g`` that makes it a Hessian,
  asked of the model (`AbstractMetricFieldModel`); models for which ``J Jᵀ`` is not a function of
  ``w̃`` (several neurons, [§2.6][theory-2-6]) refuse;
- `hessian_map_asymmetry`: the asymmetry of ``∂ₖH_ij`` of any (inverse) metric field at a point,
  by forward-mode autodiff.

**The single neuron's asymmetry is a function of the point.** Its relative asymmetry depends on
the direction of ``w̃``, for δ ≠ 0 also on ``‖w̃‖/|δ|``, and on d, so a single number (as quoted in
[THEORY §2.1][theory-2-1]) describes one point only. What is exact and point-independent: at
``w̃ = r e₁``, δ = 0, the absolute asymmetry is ``1/(2r²)`` and the relative one exactly 1/2
(derived by hand in the tests); with the warp ``g = |a|`` the asymmetry vanishes identically.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from .._models.base import (
    AbstractLinearModel,
    AbstractMetricFieldModel,
    AbstractModel,
    AbstractPredictorModel,
)
from .metrics import AbstractInverseMetricField
from .metrics import DiagonalInverseMetric as DiagonalInverseMetric
from .metrics import NeuronInverseMetric as NeuronInverseMetric


# --- J Jᵀ by autodiff -----------------------------------------------------------------------------
def _flat_parameters(model: AbstractModel):
    """``(θ, rebuild)``: the model's inexact-array leaves as one flat vector, and its inverse."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    return flat, lambda theta: eqx.combine(unravel(theta), static)


def _jacobian(fn, flat: Float[Array, " p"], n_out: int) -> Float[Array, "n p"]:
    """``∂fn/∂θ``, by forward mode when there are fewer parameters than outputs."""
    return (jax.jacfwd if flat.shape[0] <= n_out else jax.jacrev)(fn)(flat)


@eqx.filter_jit
def predictor_jacobian(model: AbstractPredictorModel) -> Float[Array, "d p"]:
    """``J = ∂w̃/∂θ`` at the model's current parameters ([THEORY §2.1][theory-2-1]), ``θ`` = all
    inexact array leaves flattened in ``jax.flatten_util.ravel_pytree`` order.

    For a model linear in its input (`AbstractLinearModel`), ``w̃_j = f(e_j)``, so ``J`` is taken
    through ``__call__`` on the basis vectors: leaves the model holds fixed (``stop_gradient``)
    get zero columns, exactly as gradient flow sees them. For other predictor models (the
    leaky-ReLU neuron, [§2.5][theory-2-5]) it is taken through ``predictor()``.
    """
    if not isinstance(model, AbstractPredictorModel):
        raise ValueError(
            f"predictor_jacobian needs a model with an end-to-end predictor "
            f"(AbstractPredictorModel); got {type(model).__name__}. For the tangent kernel of a "
            "general model use tangent_kernel(model, X)."
        )
    flat, rebuild = _flat_parameters(model)
    d = model.predictor().shape[0]
    if isinstance(model, AbstractLinearModel):
        basis = jnp.eye(d, dtype=flat.dtype)
        fn = lambda theta: jax.vmap(rebuild(theta))(basis)  # noqa: E731
    else:
        fn = lambda theta: rebuild(theta).predictor()  # noqa: E731
    return _jacobian(fn, flat, d)


@eqx.filter_jit
def predictor_inverse_metric(model: AbstractPredictorModel) -> Float[Array, "d d"]:
    """The inverse metric ``M = J Jᵀ`` of gradient flow seen on the predictor
    ([THEORY §2.1][theory-2-1] [AZ-eq-metric][theory-az-eq-metric]): ``dw̃/dt = −M ∇_w̃ L``. At
    the initialization this is also the predictor-space tangent kernel ``M₀`` of
    [AZ-F][theory-az-f] (the NTK is ``X M₀ Xᵀ``). Shape (d, d), symmetric PSD."""
    J = predictor_jacobian(model)
    return J @ J.T


def inverse_metric_field(model: AbstractPredictorModel) -> AbstractInverseMetricField:
    """The closed-form inverse metric ``M(w̃)`` of ``model``'s gradient flow as a function of the
    predictor on the model's invariant manifold ([THEORY §2.3][theory-2-3], [§2.4][theory-2-4],
    [§2.5][theory-2-5]), offered by models with the capability `AbstractMetricFieldModel`
    (`DiagonalNet`, `FullyConnectedNet` of width 1, `LeakyReLUNeuron`).

    Equal to `predictor_inverse_metric` evaluated at any parameters that share ``model``'s
    conserved quantities. Raises ``ValueError`` for models where ``J Jᵀ`` is not a function of
    ``w̃`` (several hidden neurons, [§2.6][theory-2-6]) or where no closed form is implemented.
    """
    if isinstance(model, AbstractMetricFieldModel):
        return model.inverse_metric_field()
    raise ValueError(
        f"no closed-form predictor-space metric is known for {type(model).__name__}; use "
        "predictor_inverse_metric(model) for J Jᵀ at its current parameters."
    )


# --- the Hessian-map test -------------------------------------------------------------------------
class HessianMapAsymmetry(eqx.Module):
    """Result of `hessian_map_asymmetry`.

    **Fields:**
    - `absolute`: ``max_{i,j,k} |∂ₖH_ij − ∂ⱼH_ik|``; 0 iff ``H`` is locally a Hessian
      ([AZ-HMC][theory-az-hmc]).
    - `relative`: `absolute` / ``max_{i,j,k} |∂ₖH_ij|`` (scale free; 0 when ``∂H = 0``).
    - `derivative`: ``∂ₖH_ij`` stored at ``[i, j, k]``, shape (d, d, d).
    """

    absolute: Float[Array, ""]
    relative: Float[Array, ""]
    derivative: Float[Array, "d d d"]


@eqx.filter_jit
def hessian_map_asymmetry(
    field: Callable[[Float[Array, " d"]], Float[Array, "d d"]], w: Float[ArrayLike, " d"], *,
    inverse: bool = True, warp: Callable[[Float[Array, " d"]], Float[Array, ""]] | None = None,
) -> HessianMapAsymmetry:
    """Asymmetry of ``∂ₖH_ij`` at ``w`` ([THEORY §2.1][theory-2-1] [AZ-HMC][theory-az-hmc],
    [§2.2][theory-2-2] [AZ-WARP][theory-az-warp]).

    ``H`` is ``field(w)`` (``inverse=False``) or ``field(w)⁻¹`` (``inverse=True``, the default:
    `field` returns the inverse metric ``M = J Jᵀ``), multiplied by ``warp(w)`` when a warp is
    given. Derivatives are forward mode (``jax.jacfwd``, d tangents); for an inverse metric
    ``∂ₖH = −H (∂ₖM) H`` (one solve, no differentiated inverse); for a warp
    ``∂ₖ(gH) = (∂ₖg) H + g ∂ₖH``.

    **Arguments:**
    - `field`: ``w (d,) -> (d, d)``, symmetric positive definite near `w`; any JAX-traceable
      callable (an `eqx.Module` such as `NeuronInverseMetric` keeps its values traced, so sweeps do
      not recompile).
    - `w`: the point, shape (d,).
    - `inverse`: whether `field` returns the inverse metric (True) or the metric ``H`` (False).
    - `warp`: optional scalar ``g(w) > 0``; the test is then applied to ``g H``.

    Works under ``jax.vmap`` over `w` (and over the leaves of `field`).
    """
    w = jnp.asarray(w, dtype=float)
    if w.ndim != 1:
        raise ValueError(f"w must be a vector of shape (d,); got shape {w.shape}.")
    d = w.shape[0]
    out = jax.eval_shape(field, w)
    if out.shape != (d, d):
        raise ValueError(f"field(w) must have shape ({d}, {d}); got {out.shape}.")
    if warp is not None and jax.eval_shape(warp, w).shape != ():
        raise ValueError("warp(w) must return a scalar.")

    F, dF = field(w), jax.jacfwd(field)(w)  # dF[i, j, k] = ∂ₖF_ij
    if inverse:
        H = jnp.linalg.solve(F, jnp.eye(d, dtype=F.dtype))
        H = (H + H.T) / 2
        dH = -jnp.einsum("ia,abk,bj->ijk", H, dF, H)
    else:
        H, dH = F, dF
    if warp is not None:
        g, dg = warp(w), jax.jacfwd(warp)(w)
        dH = g * dH + H[:, :, None] * dg[None, None, :]
    asym = jnp.max(jnp.abs(dH - jnp.swapaxes(dH, 1, 2)))
    scale = jnp.max(jnp.abs(dH))
    relative = jnp.where(scale > 0, asym / jnp.where(scale > 0, scale, 1.0), 0.0)
    return HessianMapAsymmetry(absolute=asym, relative=relative, derivative=dH)
