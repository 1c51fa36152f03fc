"""Two-layer ReLU / leaky-ReLU classifier with a trained first layer ([THEORY §4.0][theory-4-0],
[§4.1][theory-4-1])."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks
from .._activations.relu import leaky_relu
from .._kinks.classifier import ClassifierReducedDynamics
from .base import AbstractInvariantModel, AbstractReducibleModel
from .piecewise_linear import AbstractPiecewiseLinearModel


class TwoLayerClassifier(AbstractInvariantModel, AbstractReducibleModel,
                         AbstractPiecewiseLinearModel):
    """``f(x; W) = Σⱼ aⱼ φ(⟨wⱼ, x⟩ + bⱼ)`` with ``φ(z) = max(z, γz)`` ([THEORY §4.0][theory-4-0],
    Frei et al. in [§4.1][theory-4-1]).

    **Fields:**
    - `first`: the first layer ``W`` (m, d), rows ``wⱼ``; always trained.
    - `second`: the second layer ``a`` (m,). Fixed (wrapped in ``stop_gradient``, so every flow
      leaves it constant) unless ``train_second=True``.
    - `bias`: ``b`` (m,) inside the activation, trained, or None for the bias-free network.
    - `slope`: γ ∈ [0, 1], a fixed array leaf (0 = ReLU, e.g. 0.1 = leaky ReLU), sweepable
      without recompiling.
    - `train_second`: static flag, whether ``a`` is a trained parameter.

    The network is positively homogeneous in its trained parameters ``θ``, of degree
    ``homogeneity = 1 + train_second`` (the bias sits inside φ, so ``(wⱼ, bⱼ)`` scale together).
    Gradient flow conserves ``aⱼ² − ‖wⱼ‖² − bⱼ²`` per neuron when ``a`` is trained
    ([THEORY §2.7][theory-2-7] [DU][theory-du]); with a fixed second layer nothing is conserved and
    `invariants()` is empty.
    """

    first: Float[Array, "m d"]
    second: Float[Array, " m"]
    bias: Float[Array, " m"] | None
    slope: Float[Array, ""]
    train_second: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        m_d = jnp.shape(self.first)
        if len(m_d) != 2 or jnp.shape(self.second) != m_d[:1]:
            raise ValueError(
                "TwoLayerClassifier needs first of shape (m, d) and second of shape (m,); got "
                f"{m_d} and {jnp.shape(self.second)}.")
        if self.bias is not None and jnp.shape(self.bias) != m_d[:1]:
            raise ValueError(f"bias must have shape (m,) = {m_d[:1]}; got {jnp.shape(self.bias)}.")
        if jnp.ndim(self.slope) != 0:
            raise ValueError("slope must be a scalar.")
        if not _checks.is_traced(self.slope):
            _check_slope(self.slope)

    @classmethod
    def init(
        cls, *, dim: int, width: int, init_std: Float[ArrayLike, ""] = 1e-3,
        slope: Float[ArrayLike, ""] = 0.0, second_scale: str = "sqrt", bias: bool = False,
        train_second: bool = False, balanced: bool = True, key: PRNGKeyArray,
    ) -> "TwoLayerClassifier":
        """The initialization of [THEORY §4.1][theory-4-1]: ``W_jk(0) ~ N(0, σ²)`` with σ =
        `init_std`, ``aⱼ = ±1/√m`` (``second_scale="sqrt"``, Frei et al.) or ``±1/m`` (``"linear"``,
        Kou et al.).

        **Arguments:**
        - `dim`: input dimension d. `width`: number of neurons m.
        - `init_std`: σ ≥ 0 of the first layer; an array leaf, so a σ grid vmaps without
          recompiling.
        - `slope`: γ ∈ [0, 1] (0 = ReLU).
        - `bias`: add a trained bias initialized at 0. `train_second`: train ``a`` as well.
        - `balanced`: signs of ``a`` are exactly half +, half − (width must be even) instead of
          i.i.d. Rademacher; both classes then have m/2 neurons (Kou et al.'s ``F₊₁, F₋₁``).
        - `key`: PRNG key.
        """
        width = _checks.width(width)
        _checks.width(dim, "dim")
        if second_scale not in ("sqrt", "linear"):
            raise ValueError(f"second_scale must be 'sqrt' (±1/√m) or 'linear' (±1/m); got "
                             f"{second_scale!r}.")
        if balanced and width % 2:
            raise ValueError(f"balanced=True needs an even width; got {width}.")
        init_std = _checks.real_scalar(init_std, "init_std", nonnegative=True)
        kw, ka = jax.random.split(key)
        if balanced:
            signs = jax.random.permutation(
                ka, jnp.concatenate([jnp.ones(width // 2), -jnp.ones(width // 2)]))
        else:
            signs = jnp.where(jax.random.bernoulli(ka, 0.5, (width,)), 1.0, -1.0)
        scale = 1.0 / (jnp.sqrt(width) if second_scale == "sqrt" else width)
        return cls(first=init_std * jax.random.normal(kw, (width, dim)), second=scale * signs,
                   bias=jnp.zeros(width) if bias else None,
                   slope=_check_slope(jnp.asarray(slope, dtype=float)),
                   train_second=train_second)

    @property
    def homogeneity(self) -> int:
        """Degree L of positive homogeneity in the trained parameters: ``f(cθ) = c^L f(θ)``."""
        return 2 if self.train_second else 1

    def _second(self):
        return self.second if self.train_second else jax.lax.stop_gradient(self.second)

    def has_kinks(self) -> bool:
        return True

    def preactivations(self, x: Float[Array, " d"]) -> Float[Array, " m"]:
        """``⟨wⱼ, x⟩ + bⱼ`` for every neuron."""
        pre = self.first @ x
        return pre if self.bias is None else pre + self.bias

    def readout(self, pre: Float[Array, " m"]) -> Float[Array, ""]:
        """``Σⱼ aⱼ φ(preⱼ)``: the output given the pre-activations."""
        return jnp.dot(self._second(), leaky_relu(pre, jax.lax.stop_gradient(self.slope)))

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, ""]:
        return self.readout(self.preactivations(x))

    def output_with_slopes(self, x: Float[Array, " d"], slopes: Float[Array, " m"]
                           ) -> Float[Array, ""]:
        return jnp.dot(self._second(), slopes * self.preactivations(x))

    def slope_bounds(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        slope = jax.lax.stop_gradient(self.slope)
        return slope, jnp.ones_like(slope)

    def trained(self) -> dict[str, Array]:
        """The trained parameters θ by name (``first``, and ``second``/``bias`` when trained)."""
        out = {"first": self.first}
        if self.train_second:
            out["second"] = self.second
        if self.bias is not None:
            out["bias"] = self.bias
        return out

    def parameter_norm(self) -> Float[Array, ""]:
        """``‖θ‖₂`` over the trained parameters (``‖W‖_F`` for the fixed-``a`` network)."""
        return jnp.sqrt(sum(jnp.sum(v**2) for v in self.trained().values()))

    def reduced_dynamics(self, X, y, flow, loss):
        """Span coordinates ([THEORY §4.1][theory-4-1]) for flows without a preconditioner (gradient
        flow in any clock); None for mirror flows, whose velocity leaves the span."""
        if flow.preconditioner(self, self) is not None:
            return None
        return ClassifierReducedDynamics(self, X, y, flow, loss)

    def invariants(self) -> dict[str, Float[Array, " m"]]:
        if not self.train_second:
            return {}
        b2 = 0.0 if self.bias is None else self.bias**2
        return {"balance": self.second**2 - jnp.sum(self.first**2, axis=1) - b2}


def _check_slope(slope):
    return _checks._check(slope, lambda a: ~((a >= 0) & (a <= 1)),
                          "slope gamma must lie in [0, 1] (0 = ReLU).")
