"""Shallow univariate networks ``f(x) = Σ_k a_k σ(w_k x − b_k) + d`` ([THEORY §3][theory-3]) and the
input-bias distributions ``p_B`` of their initialization."""

import abc
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks
from .base import AbstractInvariantModel
from .piecewise_linear import AbstractPiecewiseLinearModel

Activation = Literal["relu", "abs"]


# --- input-bias distributions p_B ([THEORY §3.0][theory-3-0]: symmetric, continuous density)
# ---------------
class AbstractBiasDistribution(eqx.Module):
    """A symmetric distribution of the input biases ``b_k`` with a continuous density ``p_B``."""

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray, shape: tuple[int, ...]) -> Float[Array, "..."]:
        """I.i.d. draws of shape `shape`."""

    @abc.abstractmethod
    def density(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """``p_B(x)`` elementwise (0 outside the support)."""

    @abc.abstractmethod
    def interval(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """``[lo, hi]`` on which the variational problems are discretized: the support when it
        is compact, else a truncation where ``p_B`` is negligible."""

    @abc.abstractmethod
    def second_moment(self) -> Float[Array, ""]:
        """``σ_B² = E[B²]`` ([THEORY LM-G][theory-lm-g], 𝒢₃)."""


class UniformBias(AbstractBiasDistribution):
    """``B ~ Unif(−half_width, half_width)`` (the seed's figures, [THEORY §3.1][theory-3-1])."""

    half_width: Float[Array, ""] = eqx.field(converter=lambda c: jnp.asarray(c, dtype=float))

    def __check_init__(self):
        if not _checks.is_traced(self.half_width):
            _checks.positive_finite(self.half_width, "UniformBias half_width")

    def sample(self, key, shape):
        return jax.random.uniform(key, shape, minval=-self.half_width, maxval=self.half_width)

    def density(self, x):
        x = jnp.asarray(x, dtype=float)
        return jnp.where(jnp.abs(x) <= self.half_width, 0.5 / self.half_width, 0.0)

    def interval(self):
        return -self.half_width, self.half_width

    def second_moment(self):
        return self.half_width**2 / 3


class GaussianBias(AbstractBiasDistribution):
    """``B ~ N(0, std²)``; the variational grids use ``[−cutoff·std, cutoff·std]``."""

    std: Float[Array, ""] = eqx.field(converter=lambda c: jnp.asarray(c, dtype=float))
    cutoff: Float[Array, ""] = eqx.field(converter=lambda c: jnp.asarray(c, dtype=float),
                                         default=5.0)

    def __check_init__(self):
        if not _checks.is_traced(self.std):
            _checks.positive_finite(self.std, "GaussianBias std")
            _checks.positive(self.cutoff, "GaussianBias cutoff")

    def sample(self, key, shape):
        return self.std * jax.random.normal(key, shape)

    def density(self, x):
        x = jnp.asarray(x, dtype=float)
        return jnp.exp(-0.5 * (x / self.std) ** 2) / (self.std * jnp.sqrt(2 * jnp.pi))

    def interval(self):
        return -self.cutoff * self.std, self.cutoff * self.std

    def second_moment(self):
        return self.std**2


def activation_fn(name: Activation):
    if name == "relu":
        return jax.nn.relu
    if name == "abs":
        return jnp.abs
    raise ValueError(f"activation must be 'relu' or 'abs'; got {name!r}.")


# --- the network ----------------------------------------------------------------------------
class ShallowNet(AbstractInvariantModel, AbstractPiecewiseLinearModel):
    """``f(x) = Σ_k a_k σ(w_k x − b_k) + d`` for scalar input x, σ = ReLU or |·|
    ([THEORY §3][theory-3]).

    All of ``w, b, a`` (shape (n,)) and ``d`` (scalar) are trained. ``__call__`` takes ONE example
    of shape ``()`` or ``(1,)``; use ``X`` of shape (m, 1) with `integrate`. For the lazy regime
    of [THEORY §3.1][theory-3-1] train with learning rate ``η₀/n``
    (``MirrorFlow(..., learning_rate=η₀/n)``): the output-layer tangent kernel is Θ(n).

    The ODE right-hand side is non-smooth where a kink ``b_k/w_k`` meets a data point; at small
    widths a kink can reach a data point and slide along it. `ibflow.integrate` locates each
    such switch as an event and follows a slide exactly (Filippov, [THEORY §8.2][theory-8-2]).

    ``σ`` is positively homogeneous, so gradient flow conserves ``a_k² − w_k² − b_k²`` per neuron
    ([THEORY §2.7][theory-2-7] with the bias as a weight on the constant input); mirror flow does
    not.
    """

    w: Float[Array, " n"]
    b: Float[Array, " n"]
    a: Float[Array, " n"]
    d: Float[Array, ""]
    activation: Activation = eqx.field(static=True, default="relu")

    def __check_init__(self):
        activation_fn(self.activation)
        shapes = {jnp.shape(v) for v in (self.w, self.b, self.a)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1 or jnp.ndim(self.d) != 0:
            raise ValueError("ShallowNet needs w, b, a of one shape (n,) and a scalar d; got "
                             f"{[jnp.shape(v) for v in (self.w, self.b, self.a, self.d)]}.")

    @property
    def width(self) -> int:
        return self.w.shape[0]

    @classmethod
    def init(
        cls, width: int, *, activation: Activation = "relu",
        bias: AbstractBiasDistribution = UniformBias(2.0),
        output_std: Float[ArrayLike, ""] = 0.0, output_bias_std: Float[ArrayLike, ""] = 0.0,
        key: PRNGKeyArray,
    ) -> "ShallowNet":
        """The initialization of [THEORY §3.0–3.1][theory-3-0].

        ``w_k ~ Unif{−1, +1}``, ``b_k ~ p_B`` (`bias`: `UniformBias(B)`, `GaussianBias(s)`),
        ``a_k = output_std · N(0, 1) / √n`` (0 by default, the seed's figures),
        ``d = output_bias_std · N(0, 1)`` (0 by default).
        """
        width = _checks.width(width)
        activation_fn(activation)
        if not isinstance(bias, AbstractBiasDistribution):
            raise ValueError("bias must be UniformBias(...), GaussianBias(...) or another "
                             "AbstractBiasDistribution.")
        output_std = _checks.real_scalar(output_std, "output_std", nonnegative=True)
        output_bias_std = _checks.real_scalar(output_bias_std, "output_bias_std",
                                              nonnegative=True)
        kw, kb, ka, kd = jax.random.split(key, 4)
        w = jnp.where(jax.random.bernoulli(kw, 0.5, (width,)), 1.0, -1.0)
        b = bias.sample(kb, (width,))
        a = output_std * jax.random.normal(ka, (width,)) / jnp.sqrt(float(width))
        d = output_bias_std * jax.random.normal(kd, ())
        return cls(w=w, b=b, a=a, d=d, activation=activation)

    def features(self, x: Float[ArrayLike, ""]) -> Float[Array, " n"]:
        """``σ(w_k x − b_k)`` for one scalar input."""
        return activation_fn(self.activation)(self.w * _scalar_input(x) - self.b)

    def __call__(self, x: Float[Array, ""] | Float[Array, " 1"]) -> Float[Array, ""]:
        return jnp.dot(self.a, self.features(x)) + self.d

    def invariants(self) -> dict[str, Float[Array, " n"]]:
        return {"balance": self.a**2 - self.w**2 - self.b**2}

    def has_kinks(self) -> bool:
        return True

    def preactivations(self, x: Float[Array, ""] | Float[Array, " 1"]) -> Float[Array, " n"]:
        """``w_k x − b_k`` for one scalar input."""
        return self.w * _scalar_input(x) - self.b

    def output_with_slopes(self, x, slopes: Float[Array, " n"]) -> Float[Array, ""]:
        return jnp.dot(self.a, slopes * self.preactivations(x)) + self.d

    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        lo = 0.0 if self.activation == "relu" else -1.0
        return jnp.asarray(lo, dtype=float), jnp.asarray(1.0, dtype=float)


def _scalar_input(x):
    x = jnp.asarray(x, dtype=float)
    if x.shape not in ((), (1,)):
        raise ValueError(f"ShallowNet takes one scalar input of shape () or (1,); got {x.shape}. "
                         "Batch with jax.vmap(net)(X) for X of shape (m,) or (m, 1).")
    return x.reshape(())
