"""The function returned by the variational solvers, stored by its curvature on a grid."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._models.shallow import AbstractBiasDistribution
from .._result import AbstractResult
from .._status import Status


def midpoint_grid(bias: AbstractBiasDistribution, num_grid: int):
    """Cell midpoints ``t_j`` and widths ``ω_j`` of a uniform grid on ``bias.interval()``."""
    if not isinstance(bias, AbstractBiasDistribution):
        raise ValueError("bias must be an AbstractBiasDistribution (UniformBias, GaussianBias).")
    num_grid = _checks.width(num_grid, "num_grid", low=8)
    lo, hi = bias.interval()
    h = (hi - lo) / num_grid
    t = lo + h * (jnp.arange(num_grid, dtype=float) + 0.5)
    return t, jnp.full((num_grid,), h)


def check_data(x, h):
    """Real, finite, non-empty ``x`` (m,) or (m, 1) and ``h`` (m,), refused by name otherwise."""
    x, h = _checks.real_array(x, "x"), _checks.real_array(h, "h")
    x, h = jnp.asarray(x, dtype=float), jnp.asarray(h, dtype=float)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1 or h.shape != x.shape:
        raise ValueError(f"x must have shape (m,) or (m, 1) and h shape (m,); got {x.shape}, "
                         f"{h.shape}.")
    return _checks.finite(x, "x"), _checks.finite(h, "h")


class VariationalSolution(AbstractResult):
    """A univariate function ``g`` given by its curvature on a grid ([THEORY LM-F][theory-lm-f]).

    * ``activation="relu"``: ``g(x) = c₀ + c₁x + Σ_j ω_j β_j (x − t_j)₊`` (``F_ReLU``: affine
      outside the grid).
    * ``activation="abs"``: ``g(x) = ½ Σ_j ω_j β_j |x − t_j|`` (``F_Abs``, exactly).

    ``β_j ≈ g''(t_j)``, ``ω_j`` the cell widths. Call it on a scalar or an array of inputs.

    **Fields:** `grid` (N,), `weights` (N,), `curvature` β (N,), `intercept` c₀, `slope` c₁,
    `objective` (the discretized functional at the optimum), `status` (`Status.converged` or
    `Status.budget_exhausted` for Newton), `activation`.
    """

    grid: Float[Array, " N"]
    weights: Float[Array, " N"]
    curvature: Float[Array, " N"]
    intercept: Float[Array, ""]
    slope: Float[Array, ""]
    objective: Float[Array, ""]
    status: Status
    activation: Literal["relu", "abs"] = eqx.field(static=True)

    def __call__(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        x = jnp.asarray(x, dtype=float)

        def one(xi):
            if self.activation == "relu":
                return (self.intercept + self.slope * xi
                        + jnp.sum(self.weights * self.curvature * jax.nn.relu(xi - self.grid)))
            return 0.5 * jnp.sum(self.weights * self.curvature * jnp.abs(xi - self.grid))

        return jnp.vectorize(one)(x)
