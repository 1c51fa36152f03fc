"""A Diffrax solver whose step JAX traces once per input shape.

``diffeqsolve`` traces its solver's step up to four times per solve: once for the shapes of the
dense output, twice for the loop body's static parts and once for real. A step of an implicit
Runge–Kutta method through kinks (stage loop, chord iterations, the structured linearization)
costs ~0.25 s of tracing, so the solve loop hands Diffrax a solver whose step sits behind a
``jit`` boundary: JAX caches the traced step per input shape, and XLA inlines it as before.

Behind that boundary a Runge–Kutta step combines its stages (``Σⱼ aᵢⱼ kⱼ``) as an unrolled sum
of scaled stages (`stage_sum`) instead of Diffrax's ``tensordot`` over the stage axis. The two
agree up to the order of a 7-term sum. Under ``vmap`` the difference is large: the stage
buffer is batched on its leading axis, and XLA's CPU backend lays the ``tensordot`` out as a
matrix product that first copies the whole buffer (stages × members × state) into stage-major
order, at every stage. On 6 vmapped mirror flows (width 2048, state 6 145) that copy was most
of the step: 27.9 → 7.9 s warm, first call 33.3 → 13.5 s
(benchmarks/results/vmapped_steps.md). The sum is scoped to ibflow's own steps: Diffrax's module
attribute is swapped while the step is traced and restored after, so other Diffrax code in the
process is untouched.
"""

import contextlib
import dataclasses
import functools

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from diffrax._solver import runge_kutta as _runge_kutta


def retyped(solver, cls, **changes):
    """`solver` as an instance of `cls` (a subclass of its type), with fields `changes`."""
    fields = {f.name: getattr(solver, f.name) for f in dataclasses.fields(solver) if f.init}
    return cls(**(fields | changes))


def stage_sum(a, b):
    """``tensordot(a, leaf, axes=1)`` for each leaf of `b` (Diffrax's ``vector_tree_dot``: a
    row of a Butcher tableau, (stages,), against the stage buffer, (stages, *state)), as an
    unrolled sum of scaled stages: elementwise work that XLA fuses into one pass over the
    buffer, batched or not (module docstring)."""

    def one(leaf):
        dtype = jnp.result_type(a, leaf)
        total = a[0].astype(dtype) * leaf[0]
        for j in range(1, leaf.shape[0]):
            total = total + a[j].astype(dtype) * leaf[j]
        return total

    return jtu.tree_map(one, b)


@contextlib.contextmanager
def _stage_sums():
    original = _runge_kutta.vector_tree_dot
    _runge_kutta.vector_tree_dot = stage_sum
    try:
        yield
    finally:
        _runge_kutta.vector_tree_dot = original


@eqx.filter_jit
def _step(solver, terms, t0, t1, y0, args, solver_state, made_jump):
    with _stage_sums():  # while JAX traces the step (once per input shape)
        return super(type(solver), solver).step(terms, t0, t1, y0, args, solver_state,
                                                made_jump)


@functools.cache
def _stepping_once(cls):
    class Stepping(cls):
        def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
            return _step(self, terms, t0, t1, y0, args, solver_state, made_jump)

    Stepping.__name__ = Stepping.__qualname__ = cls.__name__
    return Stepping


def traced_once(solver):
    """`solver` with its step behind a ``jit`` boundary (the same steps and results)."""
    return retyped(solver, _stepping_once(type(solver)))
