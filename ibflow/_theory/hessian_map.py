"""The Hessian-map test of THEORY §2.1 [AZ-HMC] and the predictor-space metric of a model.

Gradient flow on the parameters θ of a model that is linear in its predictor ``w̃(θ)`` moves the
predictor by ``dw̃/dt = −J Jᵀ ∇L(w̃)`` with ``J = ∂w̃/∂θ`` ([AZ-eq-metric]). When the conserved
quantities make ``M = J Jᵀ`` a function of ``w̃`` alone, the flow is a mirror flow (an IMD) iff
``H = M⁻¹`` is a Hessian, i.e. iff ``∂ₖH_ij`` is symmetric in ``(j, k)`` ([AZ-HMC]); it is a
*warped* mirror flow iff ``g(w̃) H(w̃)`` is a Hessian for some scalar ``g > 0`` ([AZ-WARP]).

This module gives

- `predictor_inverse_metric`: ``J Jᵀ`` of any model by autodiff, at its current parameters;
- `DiagonalInverseMetric`, `NeuronInverseMetric`: the same matrix written as a function of ``w̃``
  on the invariant manifold of the diagonal net (§2.3) and of the single hidden neuron (§2.4),
  with the warp ``g`` that makes each a Hessian; `inverse_metric_field` picks the right one for a
  model, and refuses models for which ``J Jᵀ`` is not a function of ``w̃`` (several neurons, §2.6);
- `hessian_map_asymmetry`: the asymmetry of ``∂ₖH_ij`` of any (inverse) metric field at a point,
  by forward-mode autodiff.

**On THEORY §2.1's numbers (0.53 / 0.33 / 0.45 for δ = 0 / 1 / −0.5).** The relative asymmetry
of the single neuron is not a constant: it depends on the point ``w̃`` (its direction, and for
δ ≠ 0 also ``‖w̃‖/|δ|``) and on d, and THEORY does not record the point. Measured with this
function (2000 Gaussian points each; median and 5–95 % range):
d = 2: 0.52 [0.42, 0.63] / 0.42 [0.28, 0.54] / 0.53 [0.44, 0.65];
d = 3: 0.50 [0.38, 0.55] / 0.40 [0.31, 0.51] / 0.50 [0.40, 0.57];
d = 12: 0.33 [0.30, 0.43] / 0.32 [0.29, 0.40] / 0.34 [0.30, 0.44].
THEORY's three values lie inside the d = 2 ranges, so they are consistent with one random point in
d = 2; they are not reproducible as stated. What is exact and point-independent: at
``w̃ = r e₁``, δ = 0, the absolute asymmetry is ``1/(2r²)`` and the relative one exactly 1/2
(derived by hand in ``tests/test_theory_hessian_map.py``); the relative asymmetry is bounded
away from 0 at every point tested; and with the warp ``g = |a|`` it is at roundoff (≤ 1e-15).
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from .._models.base import AbstractLinearModel, AbstractModel, AbstractPredictorModel
from .._models.diagonal import DiagonalNet
from .._models.fully_connected import FullyConnectedNet
from .._models.leaky_neuron import LeakyReLUNeuron


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
    """``J = ∂w̃/∂θ`` at the model's current parameters (THEORY §2.1), ``θ`` = all inexact array
    leaves flattened in ``jax.flatten_util.ravel_pytree`` order.

    For a model linear in its input (`AbstractLinearModel`), ``w̃_j = f(e_j)``, so ``J`` is taken
    through ``__call__`` on the basis vectors: leaves the model holds fixed (``stop_gradient``)
    get zero columns, exactly as gradient flow sees them. For other predictor models (the
    leaky-ReLU neuron, §2.5) it is taken through ``predictor()``.
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
    """The inverse metric ``M = J Jᵀ`` of gradient flow seen on the predictor (THEORY §2.1
    [AZ-eq-metric]): ``dw̃/dt = −M ∇_w̃ L``. At the initialization this is also the predictor-space
    tangent kernel ``M₀`` of [AZ-F] (the NTK is ``X M₀ Xᵀ``). Shape (d, d), symmetric PSD."""
    J = predictor_jacobian(model)
    return J @ J.T


# --- closed forms on the invariant manifold -------------------------------------------------------
class DiagonalInverseMetric(eqx.Module):
    """``M(w) = diag(sqrt(4w² + k²))`` of the diagonal net on its invariant manifold (THEORY §2.3).

    Each entry depends only on its own coordinate, so ``H = M⁻¹`` passes the Hessian-map test
    unwarped (``warp ≡ 1``): ``H = ∇²Q`` with ``Q`` of [AZ-T1]/[AZ-A].

    **Fields:** `k` (d,), ``k_i > 0`` (``k_i = 2 sqrt(K_i² − w_{0,i}²)``, conserved along the flow).
    """

    k: Float[Array, " d"]

    @classmethod
    def from_model(cls, model: DiagonalNet) -> "DiagonalInverseMetric":
        """``k`` from the parameters (THEORY [AZ-A]):
        ``k = sqrt(((u₊−v₊)² + (u₋+v₋)²)((u₊+v₊)² + (u₋−v₋)²))``."""
        up, vp, um, vm = model.u_plus, model.v_plus, model.u_minus, model.v_minus
        k2 = ((up - vp) ** 2 + (um + vm) ** 2) * ((up + vp) ** 2 + (um - vm) ** 2)
        return cls(k=jnp.sqrt(k2))

    def __call__(self, w: Float[Array, " d"]) -> Float[Array, "d d"]:
        return jnp.diag(jnp.sqrt(4 * w**2 + self.k**2))

    def warp(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``g ≡ 1``: no time warp is needed (THEORY §2.3)."""
        return jnp.ones((), dtype=w.dtype)


def _neuron_a2(w, delta):
    """``a² = S + δ/2`` with ``S = sqrt(‖w̃‖² + δ²/4)`` (THEORY §2.4), written without the
    cancellation of ``S + δ/2`` for ``δ ≪ 0`` (``a² = ‖w̃‖²/(S − δ/2)`` there), and with safe
    branches so forward- and reverse-mode derivatives stay finite."""
    n2 = jnp.sum(w**2)
    S = jnp.sqrt(n2 + delta**2 / 4)
    pos = delta >= 0
    denom = jnp.where(pos, 1.0, S - delta / 2)
    return jnp.where(pos, S + delta / 2, n2 / denom)


class NeuronInverseMetric(eqx.Module):
    """``M(w̃) = a² I + w wᵀ = a² I + w̃w̃ᵀ/a²`` of a single hidden neuron (FC linear §2.4, leaky
    ReLU §2.5), written through ``w̃`` and the balancedness ``δ = a² − ‖w‖²``:
    ``a² = S + δ/2``, ``S = sqrt(‖w̃‖² + δ²/4)``.

    For ``d ≥ 2`` ``H = M⁻¹`` fails the Hessian-map test; ``g H`` with the warp
    ``g = |a| = sqrt(S + δ/2)`` passes it ([AZ-WARP]). Singular at ``w̃ = 0`` when ``δ ≤ 0``
    (``a`` can vanish there: the conic point of §2.4).

    **Fields:** `delta`, scalar.
    """

    delta: Float[Array, ""]

    @classmethod
    def from_model(cls, model: FullyConnectedNet | LeakyReLUNeuron) -> "NeuronInverseMetric":
        """``δ = a² − ‖w‖²`` of a one-neuron model."""
        if isinstance(model, FullyConnectedNet):
            if model.second.shape[0] != 1:
                raise ValueError(_SEVERAL_NEURONS.format(k=model.second.shape[0]))
            return cls(delta=model.second[0] ** 2 - jnp.sum(model.first[0] ** 2))
        if isinstance(model, LeakyReLUNeuron):
            return cls(delta=model.a**2 - jnp.sum(model.w**2))
        raise ValueError(
            f"NeuronInverseMetric.from_model: unsupported model {type(model).__name__}.")

    def __call__(self, w: Float[Array, " d"]) -> Float[Array, "d d"]:
        a2 = _neuron_a2(w, self.delta)
        return a2 * jnp.eye(w.shape[0], dtype=w.dtype) + jnp.outer(w, w) / a2

    def warp(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``g(w̃) = |a| = sqrt(S + δ/2)`` (THEORY §2.4, [AZ-WARP])."""
        return jnp.sqrt(_neuron_a2(w, self.delta))


_SEVERAL_NEURONS = (
    "a network with {k} hidden neurons has J Jᵀ = (Σ aᵢ²) I + W₁ᵀW₁, which is not a function of "
    "the predictor w̃ alone (THEORY §2.6): there is no metric field on predictor space to "
    "test. Use predictor_inverse_metric(model) for its value at the current parameters."
)


def inverse_metric_field(
    model: AbstractPredictorModel,
) -> DiagonalInverseMetric | NeuronInverseMetric:
    """The closed-form inverse metric ``M(w̃)`` of ``model``'s gradient flow as a function of the
    predictor on the model's invariant manifold (THEORY §2.3, §2.4, §2.5).

    Equal to `predictor_inverse_metric` evaluated at any parameters that share ``model``'s
    conserved quantities. Raises ``ValueError`` for models where ``J Jᵀ`` is not a function of
    ``w̃`` (several hidden neurons, §2.6) or where no closed form is implemented.
    """
    if isinstance(model, DiagonalNet):
        return DiagonalInverseMetric.from_model(model)
    if isinstance(model, (FullyConnectedNet, LeakyReLUNeuron)):
        return NeuronInverseMetric.from_model(model)
    raise ValueError(
        f"no closed-form predictor-space metric is known for {type(model).__name__}; use "
        "predictor_inverse_metric(model) for J Jᵀ at its current parameters."
    )


# --- the Hessian-map test -------------------------------------------------------------------------
class HessianMapAsymmetry(eqx.Module):
    """Result of `hessian_map_asymmetry`.

    **Fields:**
    - `absolute`: ``max_{i,j,k} |∂ₖH_ij − ∂ⱼH_ik|``; 0 iff ``H`` is locally a Hessian ([AZ-HMC]).
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
    """Asymmetry of ``∂ₖH_ij`` at ``w`` (THEORY §2.1 [AZ-HMC], §2.2 [AZ-WARP]).

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
