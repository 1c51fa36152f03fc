"""Two-layer fully connected linear network with k hidden units ([THEORY §2.4][theory-2-4],
[§2.6][theory-2-6])."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks
from .._theory.metrics import SEVERAL_NEURONS, NeuronInverseMetric
from .._theory.regularizers.base import NoExactRegularizer
from .._theory.regularizers.single_neuron import SingleNeuronRegularizer
from ._init import checked_scale_shape, layer_norms
from ._neuron import final_sign as checked_final_sign
from .base import (
    AbstractImplicitBiasModel,
    AbstractInvariantModel,
    AbstractLinearModel,
    AbstractMetricFieldModel,
)


class FullyConnectedNet(AbstractLinearModel, AbstractInvariantModel, AbstractImplicitBiasModel,
                        AbstractMetricFieldModel):
    """``f(x) = Σᵢ aᵢ <wᵢ, x>``: first layer ``W₁`` (k, d) with rows ``wᵢ``, second layer
    ``a`` (k,); predictor ``w̃ = W₁ᵀ a``. Gradient flow conserves ``W₁W₁ᵀ − aaᵀ``
    ([THEORY §2.7][theory-2-7])."""

    first: Float[Array, "k d"]
    second: Float[Array, " k"]

    def __check_init__(self):
        if jnp.ndim(self.first) != 2 or jnp.shape(self.second) != jnp.shape(self.first)[:1]:
            raise ValueError(
                "FullyConnectedNet needs first of shape (k, d) and second of shape (k,); got "
                f"{jnp.shape(self.first)} and {jnp.shape(self.second)}."
            )

    @classmethod
    def from_scale_shape(
        cls, scale: Float[ArrayLike, "*k"], shape: Float[ArrayLike, "*k"] = 0.0, *, dim: int,
        width: int = 1, symmetric: bool = False, key: PRNGKeyArray,
    ) -> "FullyConnectedNet":
        """The authors' initialization ([THEORY §2.4][theory-2-4]): per neuron
        ``|aᵢ| = sqrt(α(1+s)/(1−s))``, ``‖wᵢ‖ = sqrt(α(1−s)/(1+s))``, direction uniform on the
        sphere, sign of ``aᵢ`` random.
        So α = |aᵢ|‖wᵢ‖ (the product, not the docstring's sum) and δᵢ = aᵢ² − ‖wᵢ‖² = 4αs/(1−s²).

        **Arguments:**
        - `scale`, `shape`: α > 0 and s ∈ (−1, 1), scalars or one value per neuron (width,).
        - `dim`: input dimension d. `width`: number of hidden units k ≥ 1.
        - `symmetric`: antisymmetric pairing (needs even width): neurons k/2+1..k copy the first
          half's ``w`` and negate ``a``, so ``w̃(0) = 0`` (unbiased start,
          [THEORY AZ-F][theory-az-f]).
        - `key`: PRNG key for directions and signs.
        """
        width = _checks.width(width)
        _checks.width(dim, "dim")
        if symmetric and width % 2:
            raise ValueError(f"symmetric=True needs an even width; got {width}.")
        alpha, s = checked_scale_shape(scale, shape)
        if alpha.ndim > 1 or s.ndim > 1 or (alpha.ndim and alpha.shape != (width,)) or (
            s.ndim and s.shape != (width,)):
            raise ValueError(f"scale/shape must be scalars or vectors of length width={width}.")
        a_norm, w_norm = layer_norms(jnp.broadcast_to(alpha, (width,)),
                                     jnp.broadcast_to(s, (width,)))
        kdir, ksign = jax.random.split(key)
        half = width // 2 if symmetric else width
        directions = jax.random.normal(kdir, (half, dim))
        directions = directions / jnp.linalg.norm(directions, axis=1, keepdims=True)
        signs = jnp.where(jax.random.bernoulli(ksign, 0.5, (half,)), 1.0, -1.0)
        if symmetric:
            directions = jnp.concatenate([directions, directions])
            signs = jnp.concatenate([signs, -signs])
        return cls(first=w_norm[:, None] * directions, second=signs * a_norm)

    def predictor(self) -> Float[Array, " d"]:
        return self.first.T @ self.second

    def invariants(self) -> dict[str, Float[Array, "k k"]]:
        return {"gram": self.first @ self.first.T - jnp.outer(self.second, self.second)}

    def implicit_bias(self, *, final_sign=None) -> SingleNeuronRegularizer:
        """Width 1: Theorem 2 / Prop. 1 ([THEORY AZ-FC-Q][theory-az-fc-q], [AZ-P1][theory-az-p1]),
        with the flip rule for `final_sign`. Width > 1: `NoExactRegularizer`, since each neuron's
        bias is warped by its own ``|aᵢ(t)|`` and ``Σᵢ Qᵢ`` is only an approximation
        ([THEORY §2.6][theory-2-6])."""
        width = self.first.shape[0]
        if width != 1:
            raise NoExactRegularizer(
                f"no exact implicit regularizer is known for a fully connected network of width "
                f"{width} > 1: each neuron's bias is warped by its own |a_i(t)|, so the sum of "
                "per-neuron regularizers is only an approximation (docs/theory §2.6). Use width "
                "1, or compare against the flow itself.")
        a0, w0 = self.second[0], self.first[0]
        sign = checked_final_sign(a0, w0, final_sign)
        return SingleNeuronRegularizer(delta=a0**2 - jnp.sum(w0**2), anchor=sign * w0)

    def implicit_bias_sign(self) -> Float[Array, ""] | None:
        """``sign(a)`` for a single neuron, None for several (no exact regularizer)."""
        return jnp.sign(self.second[0]) if self.second.shape == (1,) else None

    def inverse_metric_field(self) -> NeuronInverseMetric:
        """Width 1: ``M(w̃) = a² I + w̃w̃ᵀ/a²`` with the conserved ``δ = a² − ‖w‖²``
        ([THEORY §2.4][theory-2-4]); a ``ValueError`` for several neurons ([§2.6][theory-2-6])."""
        if self.second.shape[0] != 1:
            raise ValueError(SEVERAL_NEURONS.format(k=self.second.shape[0]))
        return NeuronInverseMetric(delta=self.second[0] ** 2 - jnp.sum(self.first[0] ** 2))
