"""Abstract implicit regularizers ([THEORY §2.1][theory-2-1] item 5, [§2.2][theory-2-2]).

A regularizer ``Q`` stands for the statement "the flow's limit is ``argmin Q(w) s.t. Xw = b``",
where ``b`` is the data's targets ``y`` transformed by `interpolation_targets` (the identity for
models linear in their input, ``σ⁻¹`` for the leaky neuron of [THEORY AZ-T4][theory-az-t4]).
Regularizers returned by `ibflow.implicit_bias` already contain the linear term ``−⟨∇ψ(w₀), w⟩`` of
the
Bregman form, so ``Q.grad(w₀) = 0`` and the KKT condition reads ``∇Q(w) ∈ range Xᵀ``.
"""

import abc

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float


class NoExactRegularizer(ValueError):
    """No exact implicit regularizer is known for this model ([THEORY §2.6][theory-2-6]): ibflow
    refuses to return an approximation in its place."""


class AbstractRegularizer(eqx.Module):
    """A convex function ``Q: ℝᵈ → ℝ`` together with the interpolation set it is minimised over."""

    @abc.abstractmethod
    def value(self, w: Float[Array, " d"]) -> Float[Array, ""]:
        """``Q(w)``."""

    @abc.abstractmethod
    def grad(self, w: Float[Array, " d"]) -> Float[Array, " d"]:
        """``∇Q(w)`` (a subgradient where ``Q`` is not differentiable)."""

    @abc.abstractmethod
    def interpolation_targets(self, y: Float[Array, " n"]) -> Float[Array, " n"]:
        """Right-hand side ``b`` of the linear interpolation constraint ``Xw = b`` for targets
        ``y`` (``b = y`` except for the leaky neuron, [THEORY AZ-T4][theory-az-t4])."""


class AbstractLegendreRegularizer(AbstractRegularizer):
    """A strictly convex regularizer whose gradient map can be inverted in closed form, so that
    ``argmin Q s.t. Xw = b`` reduces to the n-dimensional smooth convex dual
    ``min_ν Q*(Xᵀν) − ⟨ν, b⟩`` with ``w(ν) = (∇Q)⁻¹(Xᵀν) = ∇Q*(Xᵀν)`` ([THEORY §2.1][theory-2-1]
    item 5).
    """

    @abc.abstractmethod
    def grad_inverse(self, z: Float[Array, " d"]) -> Float[Array, " d"]:
        """``(∇Q)⁻¹(z) = ∇Q*(z)``: the point whose gradient is ``z``."""

    @abc.abstractmethod
    def conjugate(self, z: Float[Array, " d"]) -> Float[Array, ""]:
        """The convex conjugate ``Q*(z) = sup_w ⟨z, w⟩ − Q(w)``, evaluated without overflow
        (the damped Newton of `minimize_regularizer` line-searches on it; ``+inf`` is allowed
        where it overflows)."""


class AbstractLinearProgramRegularizer(AbstractRegularizer):
    """A polyhedral regularizer (not strictly convex, no gradient inverse) whose interpolation
    problem is a linear program: `minimize_regularizer` hands it to `solve_interpolation` on the
    host instead of running the dual Newton method."""

    @abc.abstractmethod
    def solve_interpolation(self, X: np.ndarray, b: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, float]:
        """``(w, ν, stationarity)`` for ``argmin Q(w) s.t. Xw = b`` on the host (NumPy arrays):
        the minimizer, an optimal dual vector, and the violation of the optimality conditions
        (see `RegularizerMinimum.stationarity`)."""
