"""A multilayer perceptron of any depth for regression: one example in, a scalar out
([THEORY §8.3][theory-8-3]'s teacher–student studies)."""

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
from ._init import checked_scale_shape
from .piecewise_linear import AbstractPiecewiseLinearModel


class MLP(AbstractPiecewiseLinearModel):
    """``f(x) = W_L σ(⋯ σ(W₂ σ(W₁x + b₁) + b₂) ⋯) + b_L``, every layer trained.

    **Fields:** `weights`: a tuple of L ≥ 1 matrices, ``W_l`` of shape (m_l, m_{l−1}) with
    m₀ = d and m_L = 1 (the last one a row: a scalar output); `biases`: a tuple of L vectors
    ``b_l`` of shape (m_l,), or None (no biases); `activation`: any `AbstractActivation`
    (applied after every layer but the last).

    Smooth activations (`Tanh()`, `Softplus()`, `FunctionActivation`) integrate in parameter
    space. A piecewise-linear one (ReLU family) is followed through its kinks at every layer
    ([THEORY §8.2][theory-8-2]): each (example, hidden neuron) pair's crossing is located as an
    event and Filippov sliding is followed exactly, as for `TwoLayerNet`. The pairs are the
    hidden neurons of all layers, in order (`preactivations`). From depth 3 on, a slope of
    layer l changes what every later layer sees, so the sliding multipliers of all layers
    form one coupled system (`separable_kinks` is False), at most ``max_sliding_rows`` pairs
    in all (`ParameterSpace`).
    """

    weights: tuple[Float[Array, "m_out m_in"], ...]
    biases: tuple[Float[Array, " m_out"], ...] | None
    activation: AbstractActivation

    def __check_init__(self):
        if not isinstance(self.weights, tuple) or not self.weights:
            raise ValueError("MLP: weights must be a non-empty tuple of matrices.")
        shapes = [jnp.shape(w) for w in self.weights]
        if any(len(s) != 2 for s in shapes):
            raise ValueError(f"MLP: every weight must be a matrix; got shapes {shapes}.")
        for i in range(1, len(shapes)):
            if shapes[i][1] != shapes[i - 1][0]:
                raise ValueError(f"MLP: weights[{i}] has {shapes[i][1]} columns but "
                                 f"weights[{i - 1}] has {shapes[i - 1][0]} rows; got {shapes}.")
        if shapes[-1][0] != 1:
            raise ValueError(f"MLP: the last weight must have one row (a scalar output); got "
                             f"{shapes[-1]}.")
        if self.biases is not None:
            if not isinstance(self.biases, tuple) or [jnp.shape(b) for b in self.biases] != [
                    s[:1] for s in shapes]:
                raise ValueError(f"MLP: biases must be None or a tuple of vectors of shapes "
                                 f"{[s[:1] for s in shapes]}.")
        check_activation(self.activation, "MLP")

    @classmethod
    def from_scale_shape(
        cls, scale: Float[ArrayLike, ""], shape: Float[ArrayLike, "*k"] = 0.0, *, dim: int,
        widths: tuple[int, ...], activation: AbstractActivation, bias: bool = False,
        key: PRNGKeyArray,
    ) -> "MLP":
        """[THEORY §2.4][theory-2-4]'s scale/shape initialization, layer by layer. Every row of
        a hidden layer's ``W_l`` (a neuron's incoming weights) has norm ``r_l`` and a direction
        uniform on the sphere; every output weight has magnitude ``r_L`` and a random sign;
        biases start at 0. The norms satisfy ``r₁ r₂ ⋯ r_L = α`` (the scale of one path through
        the net) and ``r_{l+1}/r_l = (1+s_l)/(1−s_l)`` (the shape: the balance between
        consecutive layers). For L = 2 this is `TwoLayerNet.from_scale_shape` with one α and s
        for all neurons: ``|aⱼ| = r₂ = sqrt(α(1+s)/(1−s))``, ``‖wⱼ‖ = r₁ = sqrt(α(1−s)/(1+s))``.

        **Arguments:** `scale` α > 0 (a scalar); `shape` s ∈ (−1, 1), a scalar or one per
        consecutive pair of layers (L − 1 values); `dim` d; `widths` the hidden widths
        (m₁, …, m_{L−1}), each ≥ 1, () for a linear model; `activation`; `bias` whether to add
        trained biases; `key`.
        """
        dim = _checks.width(dim, "dim")
        if not isinstance(widths, (tuple, list)):
            raise ValueError(f"widths must be a tuple of hidden widths; got {widths!r}.")
        sizes = (dim, *(_checks.width(w, "widths") for w in widths), 1)
        depth = len(sizes) - 1
        alpha, s = checked_scale_shape(scale, shape)
        if alpha.ndim:
            raise ValueError(f"scale must be a scalar; got shape {alpha.shape}.")
        if s.ndim > 1 or (s.ndim == 1 and s.shape != (depth - 1,)):
            raise ValueError(f"shape must be a scalar or one value per pair of consecutive "
                             f"layers ({depth - 1}); got shape {s.shape}.")
        log_ratio = jnp.broadcast_to(jnp.log((1 + s) / (1 - s)), (depth - 1,))
        # log r_l = c + Σ_{k<l} log q_k, with c fixed by Σ_l log r_l = log α.
        offsets = jnp.concatenate([jnp.zeros(1), jnp.cumsum(log_ratio)])
        norms = jnp.exp((jnp.log(alpha) - jnp.sum(offsets)) / depth + offsets)
        keys = jax.random.split(key, depth)
        weights = []
        for layer, k in enumerate(keys[:-1]):
            rows = jax.random.normal(k, (sizes[layer + 1], sizes[layer]))
            rows = rows / jnp.linalg.norm(rows, axis=1, keepdims=True)
            weights.append(norms[layer] * rows)
        signs = jnp.where(jax.random.bernoulli(keys[-1], 0.5, (1, sizes[-2])), 1.0, -1.0)
        weights.append(norms[-1] * signs)
        biases = tuple(jnp.zeros(m) for m in sizes[1:]) if bias else None
        return cls(weights=tuple(weights), biases=biases, activation=activation)

    @property
    def depth(self) -> int:
        """L, the number of weight matrices."""
        return len(self.weights)

    def _forward(self, x, slopes=None):
        """The output and every hidden layer's pre-activations, with ``σ(z)`` replaced by
        ``slopes·z`` (the hidden pre-activations' slopes, concatenated) where given."""
        h, hidden, start = x, [], 0
        for layer, w in enumerate(self.weights):
            h = w @ h
            if self.biases is not None:
                h = h + self.biases[layer]
            if layer < len(self.weights) - 1:
                hidden.append(h)
                if slopes is None:
                    h = self.activation(h)
                else:
                    h = slopes[start:start + h.shape[0]] * h
                    start += h.shape[0]
        return h[0], hidden

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return self._forward(x)[0]

    def has_kinks(self) -> bool:
        return (self.depth >= 2 and isinstance(self.activation, AbstractPiecewiseLinearActivation)
                and self.activation.kinked)

    def separable_kinks(self) -> bool:
        return self.depth <= 2

    def preactivations(self, x: Float[Array, " d"]) -> Float[Array, " m"]:
        """Every hidden neuron's pre-activation, layer by layer: (m₁ + ⋯ + m_{L−1},)."""
        return jnp.concatenate(self._forward(x)[1])

    def output_with_slopes(self, x: Float[Array, " d"], slopes: Float[Array, " m"]
                           ) -> Float[Array, ""]:
        return self._forward(x, slopes)[0]

    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        return slope_bounds(self.activation)


__all__ = ["MLP"]
