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

import contextvars
import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, PyTree, Scalar

from .._solver_step import retyped
from .jacobian import AbstractShiftedInverse


class _ChordState(eqx.Module):
    inverse: AbstractShiftedInverse
    diffsize: Scalar
    diffsize_prev: Scalar
    step: Array


#: True while a step of a `with_structured_chord` solver is traced, until the step's first
#: `StructuredChord.init`: Diffrax's placeholder Jacobian (see there).
_PLACEHOLDER_DUE = contextvars.ContextVar("ibflow_placeholder_jacobian_due", default=False)


@eqx.filter_jit
def linearization(dynamics, c, state, args):
    """``dynamics.linearization`` behind a ``jit`` boundary: Diffrax traces an implicit step up
    to four times (three of them for shapes) and its stage loop calls the root finder's
    `init` at each; JAX traces this once per input shape (a kinked flow's linearization,
    with its multiplier systems, costs ~0.15 s of tracing each time)."""
    return dynamics.linearization(c, state, args)


def _small(diffsize):
    return diffsize < 10 ** (2 - jnp.finfo(diffsize.dtype).precision)


class StructuredChord(optx.AbstractRootFinder):
    """Chord iteration ``z ← z − (I − c F')⁻¹ r(z)`` with ``F'`` from
    ``dynamics.linearization`` (evaluated once per Runge–Kutta step at the predictor).

    **Arguments:** `dynamics` (an `AbstractDynamics` whose `linearization` is not None);
    `rtol`, `atol`, `norm`, `kappa` as `diffrax.VeryChord`; `structure`, optionally, the
    shapes of ``dynamics.linearization``'s result (``jax.eval_shape``), which the placeholder
    Jacobian of each step then takes instead of tracing the linearization for them.
    """

    dynamics: Any
    rtol: float
    atol: float
    norm: Callable[[PyTree], Scalar] = optx.max_norm
    kappa: float = 1e-2
    structure: Any = eqx.field(static=True, default=None)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        if "init_state" in options:
            return options["init_state"]
        if not (isinstance(args, tuple) and len(args) == 8):
            raise ValueError("StructuredChord serves Diffrax's implicit Runge–Kutta stages of an "
                             "ODETerm only.")
        _, diagonal, _, prod, ti, yi_partial, solve_args, control = args

        point = jax.tree_util.tree_map(lambda a, b: a + diagonal * b, yi_partial,
                                       prod(y, control))

        def linearized():
            return linearization(self.dynamics, ti, point, solve_args)

        if _PLACEHOLDER_DUE.get():
            # A Diffrax implicit Runge–Kutta step first factorizes at its start with a zero
            # diagonal (``I − 0·F' = I``), for an explicit first stage (an ESDIRK method's,
            # such as Kvaerno's: solved on a solve's first step only) and to give the stage
            # loop's carry a value; the stage that needs ``F'`` computes its own. The identity
            # does not need ``F'``: the factor of a zero Jacobian of the same structure is it.
            # One copy fewer of the linearization in the compiled program (for a kinked flow,
            # its multiplier systems under `vmap`: a leaky neuron's program loses 14 % of its
            # instructions and ~2 s of XLA time) and one evaluation fewer per step. Its shapes
            # come from `structure` where given: Diffrax traces each step up to four times
            # (three of them for shapes), and a kinked linearization's trace costs ~0.15 s.
            _PLACEHOLDER_DUE.set(False)
            shapes = (eqx.filter_eval_shape(linearized) if self.structure is None
                      else self.structure)
            jacobian = jax.tree_util.tree_map(
                lambda a: jnp.zeros(a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct)
                else a, shapes)
        else:
            jacobian = linearized()
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


@functools.cache
def _marking_placeholders(cls):
    """`cls` (a Diffrax implicit Runge–Kutta solver) whose `step` marks its first root-finder
    `init` as the placeholder (`_PLACEHOLDER_DUE`). Diffrax makes that call before it traces
    the stage loop, in every version pinned here; tests/test_tail_chord.py checks it."""

    class Marking(cls):
        def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
            token = _PLACEHOLDER_DUE.set(True)
            try:
                return super().step(terms, t0, t1, y0, args, solver_state, made_jump)
            finally:
                _PLACEHOLDER_DUE.reset(token)

    Marking.__name__ = Marking.__qualname__ = cls.__name__
    return Marking


def with_structured_chord(solver, chord: StructuredChord):
    """`solver` (a Diffrax implicit Runge–Kutta method) with `chord` as its root finder, and
    without the placeholder Jacobian of each step (`StructuredChord.init`)."""
    return retyped(solver, _marking_placeholders(type(solver)), root_finder=chord)
