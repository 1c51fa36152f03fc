"""``differentiable_minimize``: the exact minimizer of an implicit regularizer with derivatives
from the implicit function theorem on its KKT/dual system ([THEORY §2.1][theory-2-1] item 5,
[§2.3][theory-2-3] [AZ-A][theory-az-a], [§2.4][theory-2-4] [AZ-FC-Q][theory-az-fc-q],
[§2.5][theory-2-5] [AZ-T4][theory-az-t4])."""

import equinox as eqx
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from jaxtyping import ArrayLike, Float

from .._status import Status
from .._theory.minimizer import (
    RegularizerMinimum,
    checked_interpolation_data,
    minimize_regularizer,
)
from .._theory.regularizers.base import AbstractLegendreRegularizer, AbstractRegularizer


def _primal(inputs):
    """Dual Newton (``minimize_regularizer``); the root is ν, the rest rides along."""
    Q, X, y, rtol, max_steps = inputs
    out = minimize_regularizer(Q, X, y, rtol=rtol, max_steps=max_steps, throw=False)
    return out.nu, out


def _kkt(nu, _, inputs):
    """The KKT/dual system in ν alone: ``X (∇Q)⁻¹(Xᵀν) − b = 0``, ``b = Q.interpolation_targets(y)``
    (stationarity ``∇Q(w) = Xᵀν`` is built into ``w(ν) = (∇Q)⁻¹(Xᵀν)``). Its Jacobian in ν is
    ``X ∇²Q*(Xᵀν) Xᵀ``: symmetric positive definite for a strictly convex ``Q`` away from the
    conic point of the single neuron with δ < 0 ([THEORY §2.4][theory-2-4])."""
    Q, X, y, _, _ = inputs
    return X @ Q.grad_inverse(X.T @ nu) - Q.interpolation_targets(y)


@eqx.filter_jit
def _differentiable_minimize(Q, X, y, rtol, max_steps):
    nu, out = optx.internal.implicit_jvp(
        _primal, _kkt, (Q, X, y, rtol, max_steps), frozenset({lx.positive_semidefinite_tag}),
        lx.Cholesky())
    # Re-attach w (and the certificate) to the differentiable ν: w = ∇Q*(Xᵀν) depends on Q and
    # X both directly and through ν.
    w = Q.grad_inverse(X.T @ nu)
    return RegularizerMinimum(w=w, nu=nu, feasibility=out.feasibility,
                              stationarity=out.stationarity, steps=out.steps, status=out.status)


def differentiable_minimize(
    Q: AbstractRegularizer, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    rtol: Float[ArrayLike, ""] = 1e-13, max_steps: int = 200, throw: bool = True,
) -> RegularizerMinimum:
    """`ibflow.minimize_regularizer` whose result is differentiable (first derivatives, forward
    and reverse mode) in every array of `Q`, in `X` and in `y`.

    The primal is the damped dual Newton of `minimize_regularizer`; derivatives are **not**
    taken through its loop. At the solution the dual variable satisfies the KKT system
    ``F(ν; Q, X, y) = X·(∇Q)⁻¹(Xᵀν) − b(y) = 0`` ([THEORY §2.1][theory-2-1] item 5: ``∇Q(w) = Xᵀν``,
    ``Xw = b``), so by the implicit function theorem

        ``dν = −(X ∇²Q*(Xᵀν) Xᵀ)⁻¹ · ∂F/∂(Q, X, y) · d(Q, X, y)``

    and ``w = (∇Q)⁻¹(Xᵀν)`` is differentiated directly. One derivative costs one n×n Cholesky
    solve plus n Jacobian-vector products of ``(∇Q)⁻¹`` — the cost of a single Newton step of
    the minimizer (`optimistix.internal.implicit_jvp` with a lineax Cholesky solve; the
    reverse mode is its transpose).

    **Arguments:** as `ibflow.minimize_regularizer`; `Q` must be an
    `AbstractLegendreRegularizer` (``(∇Q)⁻¹`` in closed form), e.g. from
    `ibflow.implicit_bias`. `X` (n, d) with full row rank, `y` (n,).

    **Returns:** a `RegularizerMinimum`; its ``w`` and ``nu`` carry the derivatives.

    **Raises:** ``ValueError`` for a non-Legendre `Q` (``L1Norm`` has no unique smooth
    minimizer to differentiate) or malformed data; with `throw`, a runtime error when the
    minimizer did not converge (derivatives at an unconverged point are not those of the
    limit).
    """
    if not isinstance(Q, AbstractLegendreRegularizer):
        raise ValueError(f"differentiable_minimize needs a Legendre-type regularizer (closed-form "
                         f"(∇Q)⁻¹); got {type(Q).__name__}.")
    X, y = checked_interpolation_data(X, y, "differentiable_minimize")
    out = _differentiable_minimize(Q, X, y, jnp.asarray(rtol, dtype=float), int(max_steps))
    if throw:
        out = eqx.error_if(out, out.status != Status.converged,
                           "differentiable_minimize: the minimizer did not converge (see "
                           "RegularizerMinimum.status; pass throw=False to read it).")
    return out
