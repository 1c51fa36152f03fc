"""The ℓ1 norm, the rich-regime limit of the diagonal network ([THEORY §2.3][theory-2-3]
"Limits")."""

import jax.numpy as jnp
import numpy as np
import scipy.optimize

from ..._interpolants import min_l1_interpolant
from .base import AbstractLinearProgramRegularizer


class L1Norm(AbstractLinearProgramRegularizer):
    """``Q(w) = ‖w‖₁``. Not strictly convex, so it has no gradient inverse: `minimize_regularizer`
    solves it as a linear program (``ibflow.min_l1_interpolant``, host only)."""

    def value(self, w):
        return jnp.sum(jnp.abs(w))

    def grad(self, w):
        """A subgradient: ``sign(w)`` (0 at 0)."""
        return jnp.sign(w)

    def interpolation_targets(self, y):
        return y

    def solve_interpolation(self, X, b):
        """The primal LP by ``min_l1_interpolant``; the dual LP ``max ⟨b, ν⟩ s.t.
        ‖Xᵀν‖_∞ ≤ 1`` by HiGHS; stationarity ``max(‖Xᵀν‖_∞ − 1, 0) + max_{wᵢ≠0}
        |(Xᵀν)ᵢ − sign(wᵢ)|`` (dual feasibility and complementary slackness)."""
        w = min_l1_interpolant(X, b)
        d = X.shape[1]
        dual = scipy.optimize.linprog(
            c=-b, A_ub=np.vstack([X.T, -X.T]), b_ub=np.ones(2 * d), bounds=(None, None),
            method="highs",
            options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
        if dual.status != 0:
            raise ValueError(f"minimize_regularizer(L1Norm()): the dual LP failed: {dual.message}")
        nu = dual.x
        corr = X.T @ nu
        support = np.abs(w) > 1e-9 * max(np.max(np.abs(w)), 1e-300)
        slack = float(np.max(np.abs(corr[support] - np.sign(w[support])), initial=0.0))
        return w, nu, max(float(np.max(np.abs(corr))) - 1.0, 0.0) + slack
