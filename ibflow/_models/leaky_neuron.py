"""Two-layer single leaky-ReLU neuron ([THEORY §2.5][theory-2-5])."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks
from .._activations.relu import leaky_relu
from .._theory.metrics import NeuronInverseMetric
from .._theory.regularizers.leaky_neuron import LeakyNeuronRegularizer
from ._init import checked_scale_shape, layer_norms
from ._neuron import final_sign as checked_final_sign
from .base import AbstractImplicitBiasModel, AbstractInvariantModel, AbstractMetricFieldModel
from .piecewise_linear import AbstractPiecewiseLinearModel


class LeakyReLUNeuron(AbstractMetricFieldModel, AbstractInvariantModel, AbstractImplicitBiasModel,
                      AbstractPiecewiseLinearModel):
    """``f(x) = a σ(<w, x>)`` with ``σ(z) = max(z, γz)``, γ ∈ (0, 1] ([THEORY §2.5][theory-2-5]).

    ``slope`` is a fixed (untrained) array leaf, so it can be swept without recompiling. Gradient
    flow conserves ``δ = a² − ‖w‖²`` (positive homogeneity).
    """

    a: Float[Array, ""]
    w: Float[Array, " d"]
    slope: Float[Array, ""]

    def __check_init__(self):
        if jnp.ndim(self.a) != 0 or jnp.ndim(self.w) != 1 or jnp.ndim(self.slope) != 0:
            raise ValueError("LeakyReLUNeuron needs scalar a, vector w (d,) and scalar slope.")
        if not _checks.is_traced(self.slope):
            checked_slope(self.slope)

    @classmethod
    def from_scale_shape(
        cls, scale: Float[ArrayLike, ""], shape: Float[ArrayLike, ""] = 0.0, *, dim: int,
        slope: Float[ArrayLike, ""] = 0.2, key: PRNGKeyArray,
    ) -> "LeakyReLUNeuron":
        """Same scale/shape parametrization as the single FC neuron ([THEORY §2.4][theory-2-4]):
        ``|a| = sqrt(α(1+s)/(1−s))``, ``‖w‖ = sqrt(α(1−s)/(1+s))``, random direction and sign."""
        _checks.width(dim, "dim")
        alpha, s = checked_scale_shape(scale, shape)
        if alpha.ndim or s.ndim:
            raise ValueError("LeakyReLUNeuron takes a scalar scale and shape.")
        a_norm, w_norm = layer_norms(alpha, s)
        kdir, ksign = jax.random.split(key)
        direction = jax.random.normal(kdir, (dim,))
        sign = jnp.where(jax.random.bernoulli(ksign), 1.0, -1.0)
        return cls(a=sign * a_norm, w=w_norm * direction / jnp.linalg.norm(direction),
                   slope=checked_slope(slope))

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return self.a * leaky_relu(jnp.dot(self.w, x), jax.lax.stop_gradient(self.slope))

    def predictor(self) -> Float[Array, " d"]:
        """The end-to-end weight ``w̃ = a w``; ``f(x) = sign(a) σ(sign(a) <w̃, x>)``
        ([THEORY §2.5][theory-2-5])."""
        return self.a * self.w

    def invariants(self) -> dict[str, Float[Array, ""]]:
        return {"delta": self.a**2 - jnp.sum(self.w**2)}

    def implicit_bias(self, *, final_sign=None) -> LeakyNeuronRegularizer:
        """Theorem 4 ([THEORY AZ-T4][theory-az-t4]), with the flip rule for `final_sign`; its
        interpolation set is affine."""
        sign = checked_final_sign(self.a, self.w, final_sign)
        return LeakyNeuronRegularizer(delta=self.a**2 - jnp.sum(self.w**2), anchor=sign * self.w,
                                      slope=jnp.asarray(self.slope, dtype=float), sign=sign)

    def implicit_bias_sign(self) -> Float[Array, ""]:
        """``sign(a)``."""
        return jnp.sign(self.a)

    def inverse_metric_field(self) -> NeuronInverseMetric:
        """``M(w̃) = a² I + w̃w̃ᵀ/a²`` with the conserved ``δ = a² − ‖w‖²``
        ([THEORY §2.5][theory-2-5])."""
        return NeuronInverseMetric(delta=self.a**2 - jnp.sum(self.w**2))

    def has_kinks(self) -> bool:
        return True

    def preactivations(self, x: Float[Array, " d"]) -> Float[Array, " 1"]:
        return jnp.dot(self.w, x)[None]

    def output_with_slopes(self, x: Float[Array, " d"], slopes: Float[Array, " 1"]
                           ) -> Float[Array, ""]:
        return self.a * slopes[0] * jnp.dot(self.w, x)

    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        slope = jax.lax.stop_gradient(self.slope)
        return slope, jnp.ones_like(slope)


def checked_slope(slope):
    return _checks.in_half_open_interval(jnp.asarray(slope, dtype=float), 0.0, 1.0, "slope gamma")
