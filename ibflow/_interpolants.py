"""Reference interpolants: minimum-ℓ2 (exact linear algebra) and minimum-ℓ1 (a linear program)."""

import jax.numpy as jnp
import numpy as np
import scipy.optimize
from jaxtyping import Array, ArrayLike, Float

from . import _checks


def _underdetermined(X, caller: str):
    n, d = X.shape
    if n > d:
        raise ValueError(f"{caller} needs n <= d (an underdetermined system Xw = y); got X with "
                         f"n = {n} > d = {d}.")


def min_l2_interpolant(X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"]) -> Float[Array, " d"]:
    """``X⁺y``, the minimum-ℓ2-norm solution of ``Xw = y`` (jit/vmap/grad compatible).

    Needs real, finite X (n, d) with n <= d and y (n,); raises ``ValueError`` naming the
    argument otherwise (integer data are converted to float)."""
    X, y = _checks.data(X, y)
    _underdetermined(X, "min_l2_interpolant")
    return X.T @ jnp.linalg.solve(X @ X.T, y)


def min_l1_interpolant(X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"]) -> np.ndarray:
    """``argmin ‖w‖₁ s.t. Xw = y`` by the LP ``w = p − q``, ``p, q ≥ 0`` (HiGHS, via scipy).

    Runs on the host (not traceable); raises ``ValueError`` for malformed data (naming the
    argument) and if the system is infeasible.
    """
    X, y = _checks.data(X, y)
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    n, d = X.shape
    res = scipy.optimize.linprog(
        c=np.ones(2 * d), A_eq=np.hstack([X, -X]), b_eq=y, bounds=(0, None), method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    if res.status != 0:
        raise ValueError(f"min_l1_interpolant: no w solves Xw = y for this X ({n}×{d}) and y "
                         f"(the linear program failed: {res.message})")
    return res.x[:d] - res.x[d:]
