"""Capability of models whose activation is piecewise linear with one kink at 0
([THEORY §8.2][theory-8-2])."""

import abc

from jaxtyping import Array, Float

from .base import AbstractModel


class AbstractPiecewiseLinearModel(AbstractModel):
    r"""A model ``f(x) = Σⱼ cⱼ(θ) σ(zⱼ(θ, x)) + (terms without σ)`` with
    ``σ(z) = σ'(z)·z`` piecewise linear, ``σ'(z) = hi`` for ``z > 0`` and ``lo`` for ``z < 0``
    (leaky ReLU ``[γ, 1]``, ReLU ``[0, 1]``, ``|·|`` ``[−1, 1]``).

    Because ``σ(0) = 0`` the outputs do not depend on the slope chosen at a kink, while the
    parameter gradient is affine in it: this is what lets a Filippov flow choose
    ``σ'(0) = λ ∈ [lo, hi]`` per (example, neuron) pair ([THEORY §8.2][theory-8-2]).

    Where the velocity of neuron k's pre-activations depends only on neuron k's slopes (true
    for two-layer networks under gradient, diagonal mirror and scalar-warped flows,
    [THEORY §8.2][theory-8-2]), the equivalent-control system splits per neuron
    (`separable_kinks`). In a deeper network it does not: a kink of layer 1 changes the slopes
    every later layer sees, so all sliding pairs enter one coupled system, which is multi-affine
    in the slopes (a product of one slope per layer) and is solved by Newton's method.
    """

    def separable_kinks(self) -> bool:
        """Whether neuron k's pre-activations move with neuron k's slopes only (static, Python
        bool): then the multiplier system splits into one small system per neuron. Default
        True (one hidden layer); a deeper model returns False."""
        return True

    @abc.abstractmethod
    def has_kinks(self) -> bool:
        """Whether this instance's activation has a kink (static, Python bool). A model family
        whose activation is chosen per instance (`TwoLayerNet`) says here whether the kink
        machinery applies: False for a linear or smooth activation."""

    @abc.abstractmethod
    def preactivations(self, x: Float[Array, " d"]) -> Float[Array, " m"]:
        """``zⱼ(θ, x)`` for every neuron j on one example."""

    @abc.abstractmethod
    def output_with_slopes(self, x: Float[Array, " d"], slopes: Float[Array, " m"]
                           ) -> Float[Array, ""]:
        """The output on one example with ``σ(zⱼ)`` replaced by ``slopesⱼ·zⱼ``, slopes held
        fixed. With ``slopes = σ'(z)`` it equals ``self(x)`` and its parameter gradient is
        the gradient of the model with the given one-sided slopes."""

    @abc.abstractmethod
    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """``(lo, hi)``: ``σ'`` on ``z < 0`` and on ``z > 0`` (untrained, no gradient)."""
