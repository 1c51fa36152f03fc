"""The tail of a flow with one attracting equilibrium, finished by Newton's method.

Some reductions are gradient flows of a strictly convex function: the diagonal net's n-dim ODE
is ``ν̇ = −(2/n)∇D(ν)`` with ``D(ν) = Σⱼ Pⱼ e^{ρⱼ} + Nⱼ e^{−ρⱼ} − ⟨y, ν⟩``, ``ρ = Xᵀν``
(THEORY §2.3; ``∇²D = X diag(P e^ρ + N e^{−ρ}) Xᵀ ≻ 0`` for X of full row rank). Such a flow
converges from *every* state to the unique root ν* of its vector field, so once the explicit
phase has brought the loss down to the switch level, the rest of the path is irrelevant to the
limit: ν* is found by damped Newton on the vector field (a handful of n × n solves with the
dynamics' closed-form Jacobian) instead of tens of implicit Runge–Kutta steps (THEORY §8.1).

Derivatives: the loop runs on stopped gradients, and one zero-valued Newton correction
``ν* − (M⁻¹F(ν*) − stop_gradient(M⁻¹F(ν*)))`` carries the implicit-function derivative
``dν* = −M⁻¹ ∂F`` (M = ∂F/∂ν at ν*, itself not differentiated), so ``jax.grad`` of anything
computed from the limit is exact, and the value is ν* to the last bit.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._dynamics.base import AbstractConvexGradientDynamics

#: Targets at or below this loss (relative to ``mean(y²)/2``) ask for the limit: the path point
#: where the loss crosses them is within ~sqrt(1e-16) = 1e-8 (relative) of the limit, which Newton
#: returns. A larger target is an early stop, reached on the path by the explicit phase.
LIMIT_LEVEL = 1e-16

#: Step halvings tried before a Newton direction counts as giving no decrease (round-off floor).
MAX_HALVINGS = 30


class EquilibriumNewton(eqx.Module):
    """Tail strategy for dynamics with one attracting equilibrium
    (`AbstractConvexGradientDynamics`): damped Newton on the vector field, from the state where
    the explicit phase stopped, until the loss reaches the target.

    **Arguments:** `max_iterations`: Newton iterations at most (each counts as one step of the
    solve's budget).

    Not for trajectories: the path after the switch is not computed, so ``save_at`` needs a
    Runge–Kutta tail (``stiff_solver="auto"`` picks one then).
    """

    max_iterations: int = eqx.field(static=True, default=60)


def _stopped(tree):
    return jax.tree_util.tree_map(lambda a: jax.lax.stop_gradient(a) if eqx.is_array(a) else a,
                                  tree)


def _newton_direction(dynamics, state):
    field = dynamics.vector_field(jnp.zeros(()), state, None)
    matrix = dynamics.linearization(jnp.zeros(()), state, None).matrix
    return -jnp.linalg.solve(matrix, field)


class _Carry(eqx.Module):
    state: Float[Array, " n"]
    loss: Float[Array, ""]
    iterations: Array
    stuck: Array


def newton_phase(dynamics: AbstractConvexGradientDynamics, state, *, stop_at, budget,
                 tail: EquilibriumNewton, run=True):
    """Damped Newton from ``state`` until ``loss ≤ stop_at``. Returns ``(state, iterations,
    result)`` with a Diffrax result: ``event_occurred`` (target reached),
    ``dt_min_reached`` (no decrease along the Newton direction: the loss is at its round-off
    floor, read as `Status.stalled`) or ``max_steps_reached`` (iterations or budget spent)."""
    fixed = _stopped(dynamics)
    limit = jnp.minimum(budget, tail.max_iterations)

    def done(carry):
        return (~run | (carry.loss <= stop_at) | carry.stuck | (carry.iterations >= limit)
                | ~jnp.isfinite(carry.loss))

    def iterate(carry):
        direction = _newton_direction(fixed, carry.state)

        def shorter(search):
            step, _, _, halvings = search
            step = 0.5 * step
            trial = carry.state + step * direction
            return step, trial, fixed.loss(trial), halvings + 1

        def no_decrease(search):
            _, _, value, halvings = search
            return ~(value < carry.loss) & (halvings < MAX_HALVINGS)

        first = carry.state + direction
        _, trial, value, _ = jax.lax.while_loop(
            no_decrease, shorter, (jnp.ones(()), first, fixed.loss(first), jnp.array(0)))
        better = value < carry.loss
        return _Carry(state=jnp.where(better, trial, carry.state),
                      loss=jnp.where(better, value, carry.loss),
                      iterations=carry.iterations + 1, stuck=~better)

    start = jax.lax.stop_gradient(state)
    carry = jax.lax.while_loop(lambda c: ~done(c), iterate, _Carry(
        state=start, loss=fixed.loss(start), iterations=jnp.array(0), stuck=jnp.array(False)))
    root = carry.state
    # Zero-valued correction with the implicit-function derivative (module docstring).
    matrix = jax.lax.stop_gradient(dynamics.linearization(jnp.zeros(()), root, None).matrix)
    correction = jnp.linalg.solve(matrix, dynamics.vector_field(jnp.zeros(()), root, None))
    # A singular Jacobian (X rank-deficient, e.g. n > d: no interpolant, the loss cannot reach
    # its target) gives a non-finite correction; its value is zero anyway, so keep the state.
    correction = jnp.where(jnp.isfinite(correction), correction, 0.0)
    root = root - (correction - jax.lax.stop_gradient(correction))
    result = dfx.RESULTS.where(carry.loss <= stop_at, dfx.RESULTS.event_occurred,
                               dfx.RESULTS.where(carry.stuck, dfx.RESULTS.dt_min_reached,
                                                 dfx.RESULTS.max_steps_reached))
    result = dfx.RESULTS.where(run, result, dfx.RESULTS.successful)
    return root, carry.iterations, result
