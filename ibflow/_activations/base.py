"""Abstract activations."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


class AbstractActivation(eqx.Module):
    """A scalar function σ applied entry-wise; array fields (slopes) are sweepable leaves."""

    #: Whether σ(cz) = c σ(z) for c > 0 (then gradient flow conserves aⱼ² − ‖wⱼ‖² − bⱼ²).
    positively_homogeneous: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def __call__(self, z: Float[Array, "*s"]) -> Float[Array, "*s"]: ...


class AbstractPiecewiseLinearActivation(AbstractActivation):
    """``σ(z) = right·z`` for z ≥ 0 and ``left·z`` for z < 0: positively homogeneous, with a kink
    at 0 where the Filippov derivative σ′(0) ranges over ``[min, max](left, right)``
    ([THEORY §8.2][theory-8-2])."""

    positively_homogeneous = True
    #: Whether the two slopes differ (a kink at 0 that `ibflow.integrate` locates as an event);
    #: False for the identity.
    kinked: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def slopes(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """``(left, right)``: σ′ on z < 0 and on z > 0."""

    def __call__(self, z):
        left, right = self.slopes()
        return jnp.where(z >= 0, right * z, left * z)


def slope_bounds(activation) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(lo, hi)``: a piecewise-linear activation's slopes on z < 0 and z > 0, held constant
    (untrained, no gradient); a ValueError for any other activation."""
    if not isinstance(activation, AbstractPiecewiseLinearActivation):
        raise ValueError(f"slope_bounds: the activation {type(activation).__name__} "
                         "is not piecewise linear.")
    lo, hi = activation.slopes()
    return jax.lax.stop_gradient(lo), jax.lax.stop_gradient(hi)


def check_activation(activation, owner: str) -> None:
    """Raise ValueError unless `activation` is an ibflow activation (`owner` names the model)."""
    if not isinstance(activation, AbstractActivation):
        raise ValueError(f"{owner}: activation must be an ibflow activation (e.g. ReLU() or "
                         f"Tanh()); got {type(activation).__name__}.")
