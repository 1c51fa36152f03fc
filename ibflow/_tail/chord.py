"""A chord root finder for Diffrax's implicit Runge–Kutta stages that takes its Jacobian from
the dynamics (dense closed form, or low rank by Woodbury) instead of differentiating the stage
function into a p × p matrix.

Why not `diffrax.VeryChord` with a custom lineax solver: the linear solver only sees the stage
function as an opaque operator, so the n ≪ p structure of [THEORY §8.1][theory-8-1] is lost. Diffrax
passes the stage's coefficients to the root finder (``_implicit_relation_f``'s arguments: stage
index,
diagonal coefficient, vector field, product, time, partial state, args, control — documented in
diffrax as the hook for custom nonlinear solvers), so this root finder linearizes the *dynamics*
at the stage's predictor and factorizes ``I − c·F'`` once per step (c = diagonal × step).
Convergence test and divergence test are those of `diffrax.VeryChord`.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, PyTree, Scalar

from .jacobian import AbstractShiftedInverse


class _ChordState(eqx.Module):
    inverse: AbstractShiftedInverse
    diffsize: Scalar
    diffsize_prev: Scalar
    step: Array


def _small(diffsize):
    return diffsize < 10 ** (2 - jnp.finfo(diffsize.dtype).precision)


class StructuredChord(optx.AbstractRootFinder):
    """Chord iteration ``z ← z − (I − c F')⁻¹ r(z)`` with ``F'`` from
    ``dynamics.linearization`` (evaluated once per Runge–Kutta step at the predictor).

    **Arguments:** `dynamics` (an `AbstractDynamics` whose `linearization` is not None);
    `rtol`, `atol`, `norm`, `kappa` as `diffrax.VeryChord`.
    """

    dynamics: Any
    rtol: float
    atol: float
    norm: Callable[[PyTree], Scalar] = optx.max_norm
    kappa: float = 1e-2

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        if "init_state" in options:
            return options["init_state"]
        if not (isinstance(args, tuple) and len(args) == 8):
            raise ValueError("StructuredChord serves Diffrax's implicit Runge–Kutta stages of an "
                             "ODETerm only.")
        _, diagonal, _, prod, ti, yi_partial, solve_args, control = args
        point = jax.tree_util.tree_map(lambda a, b: a + diagonal * b, yi_partial,
                                       prod(y, control))
        jacobian = self.dynamics.linearization(ti, point, solve_args)
        inverse = jax.lax.stop_gradient(jacobian.factor(diagonal * control))
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(y))
        return _ChordState(inverse=inverse, diffsize=jnp.array(jnp.inf, dtype),
                           diffsize_prev=jnp.array(1.0, dtype), step=jnp.array(0))

    def step(self, fn, y, args, options, state, tags):
        fx, aux = fn(y, args)
        diff = state.inverse(fx)
        new_y = jax.tree_util.tree_map(lambda a, b: a - b, y, diff)
        scale = jax.tree_util.tree_map(lambda a: self.atol + self.rtol * jnp.abs(a), new_y)
        diffsize = self.norm(jax.tree_util.tree_map(lambda a, b: a / b, diff, scale))
        return new_y, _ChordState(inverse=state.inverse, diffsize=diffsize,
                                  diffsize_prev=state.diffsize, step=state.step + 1), aux

    def terminate(self, fn, y, args, options, state, tags):
        at_least_two = state.step >= 2
        rate = state.diffsize / state.diffsize_prev
        factor = state.diffsize * rate / (1 - rate)
        small = _small(state.diffsize)
        diverged = ~jnp.isfinite(rate) | (rate > 2)
        converged = (factor > 0) & (factor < self.kappa)
        terminate = at_least_two & (small | diverged | converged)
        result = optx.RESULTS.where(at_least_two & ~small & (diverged | ~converged),
                                    optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful)
        return terminate, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
