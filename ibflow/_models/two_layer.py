"""A two-layer network for regression: m neurons, d inputs, any activation
([THEORY §2.4][theory-2-4], [§2.6][theory-2-6], [§2.8][theory-2-8]'s ReLU teacher–student)."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks
from .._activations.base import (
    AbstractActivation,
    AbstractPiecewiseLinearActivation,
    check_activation,
    slope_bounds,
)
from .._activations.relu import Identity
from ._init import checked_scale_shape, layer_norms
from .base import AbstractInvariantModel
from .piecewise_linear import AbstractPiecewiseLinearModel


class TwoLayerNet(AbstractInvariantModel, AbstractPiecewiseLinearModel):
    """``f(x) = Σⱼ aⱼ σ(⟨wⱼ, x⟩ + bⱼ)`` with every layer trained.

    **Fields:** `first` W (m, d); `second` a (m,); `bias` b (m,) or None; `activation` an
    `AbstractActivation` (`Identity()`, `ReLU()`, `LeakyReLU(γ)`, `Absolute()`, `Tanh()`,
    `Softplus()`, `FunctionActivation(fn)`).

    With a piecewise-linear activation other than `Identity()` (ReLU, leaky ReLU, |·|),
    `ibflow.integrate` follows the flow through its kinks (activation switches located as
    events, Filippov sliding, [THEORY §8.2][theory-8-2]).

    For positively homogeneous activations gradient flow conserves ``aⱼ² − ‖wⱼ‖² − bⱼ²`` per
    neuron ([THEORY §2.7][theory-2-7] [DU][theory-du] Thm 2.1): `invariants()` returns it as
        ``"balance"`` (for other
    activations the same quantity is returned but is not conserved).
    """

    first: Float[Array, "m d"]
    second: Float[Array, " m"]
    bias: Float[Array, " m"] | None
    activation: AbstractActivation

    def __check_init__(self):
        m_d = jnp.shape(self.first)
        if len(m_d) != 2 or jnp.shape(self.second) != m_d[:1]:
            raise ValueError(f"TwoLayerNet needs first of shape (m, d) and second of shape (m,); "
                             f"got {m_d} and {jnp.shape(self.second)}.")
        if self.bias is not None and jnp.shape(self.bias) != m_d[:1]:
            raise ValueError(f"bias must have shape (m,) = {m_d[:1]}; got {jnp.shape(self.bias)}.")
        check_activation(self.activation, "TwoLayerNet")

    @classmethod
    def from_scale_shape(
        cls, scale: Float[ArrayLike, "*m"], shape: Float[ArrayLike, "*m"] = 0.0, *, dim: int,
        width: int, activation: AbstractActivation = Identity(), bias: bool = False,
        key: PRNGKeyArray,
    ) -> "TwoLayerNet":
        """[THEORY §2.4][theory-2-4]'s scale/shape initialization per neuron:
        ``|aⱼ| = sqrt(α(1+s)/(1−s))``, ``‖wⱼ‖ = sqrt(α(1−s)/(1+s))`` (so α = |aⱼ|‖wⱼ‖ and δⱼ = aⱼ² −
        ‖wⱼ‖² = 4αs/(1−s²)),
        directions uniform on the sphere, signs of ``aⱼ`` random; biases start at 0.

        **Arguments:** `scale` α > 0 and `shape` s ∈ (−1, 1), scalars or one per neuron;
        `dim` d; `width` m; `activation`; `bias` whether to add trained biases; `key`.
        """
        width = _checks.width(width)
        dim = _checks.width(dim, "dim")
        alpha, s = checked_scale_shape(scale, shape)
        for name, value in (("scale", alpha), ("shape", s)):
            if value.ndim > 1 or (value.ndim == 1 and value.shape != (width,)):
                raise ValueError(f"{name} must be a scalar or a vector of length width={width}.")
        a_norm, w_norm = layer_norms(jnp.broadcast_to(alpha, (width,)),
                                     jnp.broadcast_to(s, (width,)))
        kdir, ksign = jax.random.split(key)
        directions = jax.random.normal(kdir, (width, dim))
        directions = directions / jnp.linalg.norm(directions, axis=1, keepdims=True)
        signs = jnp.where(jax.random.bernoulli(ksign, 0.5, (width,)), 1.0, -1.0)
        return cls(first=w_norm[:, None] * directions, second=signs * a_norm,
                   bias=jnp.zeros(width) if bias else None, activation=activation)

    @property
    def width(self) -> int:
        return self.first.shape[0]

    def preactivations(self, x: Float[Array, " d"]) -> Float[Array, " m"]:
        """``⟨wⱼ, x⟩ + bⱼ`` for every neuron."""
        pre = self.first @ x
        return pre if self.bias is None else pre + self.bias

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return jnp.dot(self.second, self.activation(self.preactivations(x)))

    def has_kinks(self) -> bool:
        return (isinstance(self.activation, AbstractPiecewiseLinearActivation)
                and self.activation.kinked)

    def output_with_slopes(self, x: Float[Array, " d"], slopes: Float[Array, " m"]
                           ) -> Float[Array, ""]:
        return jnp.dot(self.second, slopes * self.preactivations(x))

    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        return slope_bounds(self.activation)

    def invariants(self) -> dict[str, Float[Array, " m"]]:
        b2 = 0.0 if self.bias is None else self.bias**2
        return {"balance": self.second**2 - jnp.sum(self.first**2, axis=1) - b2}
