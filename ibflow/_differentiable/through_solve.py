"""The limit point through the ODE solve: reverse-mode derivatives of ``ibflow.integrate`` by
Diffrax's recursive checkpointing, in memory bounded by the number of checkpoints."""

import diffrax as dfx
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._integrate import integrate
from .._models.base import AbstractModel
from .._solution import Solution


def checkpointed_adjoint(checkpoints: int | None) -> dfx.RecursiveCheckpointAdjoint:
    """``diffrax.RecursiveCheckpointAdjoint(checkpoints)`` after validating `checkpoints`.

    With ``c`` checkpoints the backward pass stores ``c`` copies of the solver's loop state
    (ODE state + solver and controller state) whatever the number of steps ``N`` (treeverse
    recomputation: run time grows from ~2× to ~``N/c``× the forward solve as ``c`` shrinks).
    ``None`` is Diffrax's default ``c ≈ sqrt(2·max_steps)``.
    """
    if checkpoints is not None:
        checkpoints = _checks.width(checkpoints, "checkpoints (None or a count)")
    return dfx.RecursiveCheckpointAdjoint(checkpoints=checkpoints)


def solve_limit(model: AbstractModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
                checkpoints: int | None = None, throw: bool = True, **integrate_options
                ) -> Solution:
    """``ibflow.integrate`` set up for reverse-mode differentiation of its limit point.

    Discretise-then-differentiate: the derivative is that of the computed solution, through
    both phases (explicit Tsit5, then the implicit Kvaerno5 tail, whose stage equations are
    differentiated by optimistix's implicit function theorem rather than through the Newton
    iterations) and through the event that ends the solve (at ``L ≤ target_loss`` the velocity
    is ~1e-12 of its scale, so the stopping time's own sensitivity is negligible; Diffrax's PID
    controller does not differentiate step sizes). With ``rtol=1e-12`` it agrees with the
    implicit route (`differentiable_minimize`) to better than 1e-8 relative on the diagonal
    net, the single linear neuron and the leaky neuron (tests/test_differentiable.py).

    **Arguments:** `model`, `X`, `y` and `**integrate_options` as `ibflow.integrate`;
    `checkpoints` as `checkpointed_adjoint`.
    """
    if "adjoint" in integrate_options:
        raise ValueError("pass checkpoints=..., not adjoint=..., to solve_limit.")
    return integrate(model, X, y, adjoint=checkpointed_adjoint(checkpoints), throw=throw,
                     **integrate_options)
