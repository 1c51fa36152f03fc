"""Mirror flow with a separable potential ([THEORY §1][theory-1] [AZ-eq-IMD][theory-az-eq-imd],
[§3.0][theory-3-0])."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._potentials.base import AbstractPotential
from .._potentials.scaling import AbstractScaling, Unscaled
from .base import AbstractFlow


class MirrorFlow(AbstractFlow):
    """``d/dt ∇Φ(θ) = −η ∇L(θ)``, i.e. ``dθ/dt = −η ∇²Φ(θ)⁻¹ ∇L(θ)`` ([THEORY §1][theory-1],
    [§3.0][theory-3-0]).

    Φ is separable and centred at the initialization: ``Φ(θ) = Σ_j φ(θ_j − θ_j(0))``
    (``scaling=Unscaled()``) or ``n⁻² Σ_j φ(n(θ_j − θ_j(0)))`` (``scaling=WidthScaled(n)``). Its
    Hessian is diagonal, so the velocity is ``−η ∇L / Φ''`` entry by entry: no matrix inverse.

    ``MirrorFlow(QuadraticPotential(0.5))`` is `GradientFlow` exactly. For the shallow networks
    of [THEORY §3][theory-3] use ``learning_rate = η₀ / n`` (n = width).

    **Arguments:**
    - `potential`: the scalar φ (`QuadraticPotential`, `CubicPotential`, ..., `FunctionPotential`).
    - `scaling`: `Unscaled()` (default) or `WidthScaled(n)`.
    - `learning_rate`: η > 0, an array leaf (sweeping it does not recompile).
    """

    potential: AbstractPotential
    scaling: AbstractScaling
    learning_rate: Float[Array, ""]

    time_warped = False

    def __init__(self, potential: AbstractPotential, *, scaling: AbstractScaling = Unscaled(),
                 learning_rate: Float[ArrayLike, ""] = 1.0):
        if not isinstance(potential, AbstractPotential):
            raise ValueError(f"MirrorFlow needs an ibflow potential (e.g. QuadraticPotential()); "
                             f"got {type(potential).__name__}.")
        if not isinstance(scaling, AbstractScaling):
            raise ValueError("scaling must be Unscaled() or WidthScaled(width).")
        learning_rate = jnp.asarray(learning_rate, dtype=float)
        if jnp.ndim(learning_rate) != 0:
            raise ValueError("learning_rate must be a scalar.")
        self.potential = potential
        self.scaling = scaling
        self.learning_rate = _checks.positive(learning_rate, "learning_rate")

    def preconditioner(self, model, initial):
        """``η / Φ''(θ − θ₀)`` entry by entry (the inverse of the diagonal mirror metric)."""
        params, params0 = (eqx.filter(m, eqx.is_inexact_array) for m in (model, initial))
        return jax.tree_util.tree_map(
            lambda p, p0: self.learning_rate / self.scaling.hessian(self.potential, p - p0),
            params, params0)

    def speed(self, model, initial, grad, loss):
        return jnp.ones((), dtype=jnp.result_type(loss))
