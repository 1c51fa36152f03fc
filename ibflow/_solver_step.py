"""A Diffrax solver whose step JAX traces once per input shape.

``diffeqsolve`` traces its solver's step up to four times per solve: once for the shapes of the
dense output, twice for the loop body's static parts and once for real. A step of an implicit
Runge–Kutta method through kinks (stage loop, chord iterations, the structured linearization)
costs ~0.25 s of tracing, so the solve loop hands Diffrax a solver whose step sits behind a
``jit`` boundary: JAX caches the traced step per input shape, and XLA inlines it as before.
"""

import dataclasses
import functools

import equinox as eqx


def retyped(solver, cls, **changes):
    """`solver` as an instance of `cls` (a subclass of its type), with fields `changes`."""
    fields = {f.name: getattr(solver, f.name) for f in dataclasses.fields(solver) if f.init}
    return cls(**(fields | changes))


@eqx.filter_jit
def _step(solver, terms, t0, t1, y0, args, solver_state, made_jump):
    return super(type(solver), solver).step(terms, t0, t1, y0, args, solver_state, made_jump)


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
