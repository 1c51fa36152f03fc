"""Closed-form inverse metrics ``M(w̃)`` of gradient flow on predictor space, as functions of the
predictor on a model's invariant manifold ([THEORY §2.1][theory-2-1]
[AZ-eq-metric][theory-az-eq-metric]).

Models that have one offer it through `AbstractMetricFieldModel.inverse_metric_field`; this module
knows no model, so it sits below `ibflow._models` in the layering (`docs/architecture.md`).
"""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float


class AbstractInverseMetricField(eqx.Module):
    """``w̃ ↦ M(w̃)``, symmetric positive definite, with the scalar warp ``g(w̃) > 0`` that makes
    ``g M⁻¹`` a Hessian ([AZ-HMC][theory-az-hmc], [AZ-WARP][theory-az-warp])."""

    @abc.abstractmethod
    def __call__(self, w: Float[Array, " d"]) -> Float[Array, "d d"]:
        """``M(w̃)``."""

    @abc.abstractmethod
    def warp(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``g(w̃)``."""


class DiagonalInverseMetric(AbstractInverseMetricField):
    """``M(w) = diag(sqrt(4w² + k²))`` of the diagonal net on its invariant manifold
    ([THEORY §2.3][theory-2-3]).

    Each entry depends only on its own coordinate, so ``H = M⁻¹`` passes the Hessian-map test
    unwarped (``warp ≡ 1``): ``H = ∇²Q`` with ``Q`` of [AZ-T1][theory-az-t1]/[AZ-A][theory-az-a].

    **Fields:** `k` (d,), ``k_i > 0`` (``k_i = 2 sqrt(K_i² − w_{0,i}²)``, conserved along the flow;
    `ibflow.DiagonalNet.inverse_metric_field` computes it from the parameters).
    """

    k: Float[Array, " d"]

    def __call__(self, w: Float[Array, " d"]) -> Float[Array, "d d"]:
        return jnp.diag(jnp.sqrt(4 * w**2 + self.k**2))

    def warp(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``g ≡ 1``: no time warp is needed ([THEORY §2.3][theory-2-3])."""
        return jnp.ones((), dtype=w.dtype)


def _neuron_a2(w, delta):
    """``a² = S + δ/2`` with ``S = sqrt(‖w̃‖² + δ²/4)`` ([THEORY §2.4][theory-2-4]), written without
    the cancellation of ``S + δ/2`` for ``δ ≪ 0`` (``a² = ‖w̃‖²/(S − δ/2)`` there), and with safe
    branches so forward- and reverse-mode derivatives stay finite."""
    n2 = jnp.sum(w**2)
    S = jnp.sqrt(n2 + delta**2 / 4)
    pos = delta >= 0
    denom = jnp.where(pos, 1.0, S - delta / 2)
    return jnp.where(pos, S + delta / 2, n2 / denom)


class NeuronInverseMetric(AbstractInverseMetricField):
    """``M(w̃) = a² I + w wᵀ = a² I + w̃w̃ᵀ/a²`` of a single hidden neuron (FC linear
    [§2.4][theory-2-4], leaky ReLU [§2.5][theory-2-5]), written through ``w̃`` and the
    balancedness ``δ = a² − ‖w‖²``: ``a² = S + δ/2``, ``S = sqrt(‖w̃‖² + δ²/4)``.

    For ``d ≥ 2`` ``H = M⁻¹`` fails the Hessian-map test; ``g H`` with the warp
    ``g = |a| = sqrt(S + δ/2)`` passes it ([AZ-WARP][theory-az-warp]). Singular at ``w̃ = 0`` when
    ``δ ≤ 0`` (``a`` can vanish there: the conic point of [§2.4][theory-2-4]).

    **Fields:** `delta`, scalar.
    """

    delta: Float[Array, ""]

    def __call__(self, w: Float[Array, " d"]) -> Float[Array, "d d"]:
        a2 = _neuron_a2(w, self.delta)
        return a2 * jnp.eye(w.shape[0], dtype=w.dtype) + jnp.outer(w, w) / a2

    def warp(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``g(w̃) = |a| = sqrt(S + δ/2)`` ([THEORY §2.4][theory-2-4],
        [AZ-WARP][theory-az-warp])."""
        return jnp.sqrt(_neuron_a2(w, self.delta))


#: The refusal for several hidden neurons, shared by the models that have them.
SEVERAL_NEURONS = (
    "a network with {k} hidden neurons has J Jᵀ = (Σ aᵢ²) I + W₁ᵀW₁, which is not a function of "
    "the predictor w̃ alone (docs/theory §2.6): there is no metric field on predictor space to "
    "test. Use predictor_inverse_metric(model) for its value at the current parameters."
)
