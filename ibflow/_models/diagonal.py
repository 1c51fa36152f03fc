"""Untied two-layer diagonal linear network ([THEORY §2.3][theory-2-3])."""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._dynamics.diagonal import DiagonalReducedDynamics
from .._losses import AbstractSquareLoss
from .._theory.metrics import DiagonalInverseMetric
from .._theory.regularizers.diagonal import DiagonalNetRegularizer
from ._init import checked_scale_shape, layer_norms
from .base import (
    AbstractImplicitBiasModel,
    AbstractInvariantModel,
    AbstractLinearModel,
    AbstractMetricFieldModel,
    AbstractReducibleModel,
)
from .cost import AbstractCostEstimate


class DiagonalNet(AbstractLinearModel, AbstractInvariantModel, AbstractReducibleModel,
                  AbstractImplicitBiasModel, AbstractMetricFieldModel, AbstractCostEstimate):
    """``f(x) = <u₊∘v₊ − u₋∘v₋, x>`` with all four vectors trained ([THEORY §2.3][theory-2-3]).

    Gradient flow conserves ``u₊² − v₊²`` and ``u₋² − v₋²`` per coordinate. Construct from any
    explicit (e.g. biased, Appendix A) initialization with ``DiagonalNet(u₊, v₊, u₋, v₋)``, or
    from scale and shape with ``DiagonalNet.from_scale_shape``.
    """

    u_plus: Float[Array, " d"]
    v_plus: Float[Array, " d"]
    u_minus: Float[Array, " d"]
    v_minus: Float[Array, " d"]

    def __check_init__(self):
        shapes = {jnp.shape(a) for a in (self.u_plus, self.v_plus, self.u_minus, self.v_minus)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError(f"DiagonalNet needs four vectors of one shape (d,); got {shapes}.")

    @classmethod
    def from_scale_shape(
        cls, scale: Float[ArrayLike, "*d"], shape: Float[ArrayLike, "*d"] = 0.0, *,
        dim: int | None = None,
    ) -> "DiagonalNet":
        """Unbiased initialization of [THEORY AZ-7.1][theory-az-7-1]: ``u₀ = sqrt(α(1−s)/(1+s))``,
        ``v₀ = sqrt(α(1+s)/(1−s))`` for both signs, so ``w(0) = 0``.

        **Arguments:**
        - `scale`: α > 0, a scalar or one value per coordinate (d,).
        - `shape`: s ∈ (−1, 1), a scalar or one value per coordinate.
        - `dim`: d; needed only when both `scale` and `shape` are scalars.
        """
        if dim is not None:
            _checks.width(dim, "dim")
        alpha, s = checked_scale_shape(scale, shape)
        d = jnp.broadcast_shapes(alpha.shape, s.shape)
        if len(d) == 0:
            if dim is None:
                raise ValueError("pass dim=d when scale and shape are both scalars.")
            d = (dim,)
        elif len(d) != 1 or (dim is not None and d != (dim,)):
            raise ValueError(f"scale/shape must be scalars or vectors of length dim; got shape "
                             f"{d}.")
        v0, u0 = layer_norms(jnp.broadcast_to(alpha, d), jnp.broadcast_to(s, d))
        return cls(u0, v0, u0, v0)

    def predictor(self) -> Float[Array, " d"]:
        return self.u_plus * self.v_plus - self.u_minus * self.v_minus

    def invariants(self) -> dict[str, Float[Array, " d"]]:
        return {"plus": self.u_plus**2 - self.v_plus**2,
                "minus": self.u_minus**2 - self.v_minus**2}

    # --- closed-form trajectory ([THEORY §2.3][theory-2-3])
    # ----------------------------------------------
    def reduced_dynamics(self, X, y, flow, loss):
        """Gradient flow in real time (no preconditioner, no time warp) on the square loss
        (`AbstractSquareLoss`) reduces to an n-dim ODE ([THEORY §2.3][theory-2-3])."""
        plain = not flow.time_warped and flow.preconditioner(self, self) is None
        if plain and isinstance(loss, AbstractSquareLoss):
            return DiagonalReducedDynamics(self, X, y)
        return None

    def implicit_bias(self, *, final_sign=None) -> DiagonalNetRegularizer:
        """Theorem 1 / Appendix A for any initialization ([THEORY AZ-T1][theory-az-t1],
        [AZ-A][theory-az-a])."""
        if final_sign is not None:
            raise ValueError("final_sign applies only to single-neuron models.")
        p, m = self.exp_coefficients()
        return DiagonalNetRegularizer.from_exp_coefficients(p, m, self.predictor())

    def implicit_bias_sign(self) -> None:
        return None

    def inverse_metric_field(self) -> DiagonalInverseMetric:
        """``M(w) = diag(sqrt(4w² + k²))`` with the conserved ``k = 4 sqrt(P N)``
        ([THEORY §2.3][theory-2-3], [AZ-A][theory-az-a])."""
        p, m = self.exp_coefficients()
        return DiagonalInverseMetric(k=4.0 * jnp.sqrt(p * m))

    def exp_coefficients(self) -> tuple[Float[Array, " d"], Float[Array, " d"]]:
        """``(P, N) ≥ 0`` with ``w(ρ) = P e^ρ − N e^{−ρ}`` along gradient flow, where
        ``ρ(t) = −(2/n) Xᵀ ∫₀ᵗ (Xw − y) ds`` ([THEORY §2.3][theory-2-3] closed-form trajectory;
        ``P − N = w₀``, ``P + N = K``)."""
        a_p, b_p = self.u_plus + self.v_plus, self.u_plus - self.v_plus
        a_m, b_m = self.u_minus + self.v_minus, self.u_minus - self.v_minus
        return (a_p**2 + b_m**2) / 4, (b_p**2 + a_m**2) / 4

    def transported(self, rho: Float[Array, " d"]) -> "DiagonalNet":
        """The parameters gradient flow reaches from ``self`` when ``ρ`` has the value given."""
        a_p, b_p = self.u_plus + self.v_plus, self.u_plus - self.v_plus
        a_m, b_m = self.u_minus + self.v_minus, self.u_minus - self.v_minus
        up, dn = jnp.exp(rho / 2), jnp.exp(-rho / 2)
        return DiagonalNet(
            u_plus=(a_p * up + b_p * dn) / 2, v_plus=(a_p * up - b_p * dn) / 2,
            u_minus=(a_m * dn + b_m * up) / 2, v_minus=(a_m * dn - b_m * up) / 2,
        )

    def estimated_cost(self) -> Float[Array, ""]:
        """Predicted step count (for sweep ordering): the escape from a small initialization
        takes ~log(1/k) e-folds ([THEORY §2.3][theory-2-3], k = 2·sqrt(K² − w₀²) = 4·sqrt(P·N)), so
        more steps for small k."""
        p, m = self.exp_coefficients()
        return -jnp.mean(jnp.log(4 * jnp.sqrt(p * m) + 1e-300))
