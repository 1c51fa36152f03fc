"""One Diffrax solver for every leg of the segment loop (`ibflow._segments.Leg`): each step is
the step of the current leg's solver (the explicit one, then the implicit tail), so a switching
flow's compiled program holds one ``diffeqsolve`` for both phases instead of one per phase: one
loop, one event function (inlined at three sites: a segment's start, a step's end, the event
root finder) and one event root finder (benchmarks/results/compile_ops.md).

A segment lies within one leg (a hand-over to the next leg ends a segment, like a switch), so a
solve never changes method between steps: the solver's state holds each leg's own, and only the
current leg's advances. The step is a ``lax.switch`` on the leg, which the segment loop keeps
the same for every member of a vmapped batch (`ibflow._segments._batch_leg`), so that a step
runs one method: a batched leg would turn the switch into a select that runs every leg's.

Its state also remembers the last accepted step (`LastStep`: its ends and dense output), on
which the segment loop locates the event that ended a segment (`ibflow._segments._locate`)
once Diffrax has stopped at the end of the step that crossed.
"""

from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from diffrax._root_finder import use_stepsize_tol
from jaxtyping import Array


class _LegDense(eqx.Module):
    """The dense output of a step: each leg's own (zeros where that leg did not step), with
    the legs' interpolation classes."""

    infos: tuple
    classes: tuple = eqx.field(static=True)


class _LegInterpolation(dfx.AbstractLocalInterpolation):
    t0: Array
    t1: Array
    leg: Array
    parts: tuple

    def evaluate(self, t0, t1=None, left=True):
        return jax.lax.switch(self.leg, [lambda part=part: part.evaluate(t0, t1, left)
                                         for part in self.parts])


def _interpolation(*, t0, t1, leg, dense: _LegDense):
    return _LegInterpolation(t0=t0, t1=t1, leg=leg, parts=tuple(
        cls(t0=t0, t1=t1, **info) for cls, info in zip(dense.classes, dense.infos, strict=True)))


def with_controller_tolerances(solver, controller):
    """`solver` with the root-finder tolerances it takes from the step-size controller (Diffrax's
    default, `diffrax.with_stepsize_controller_tols`) filled in from `controller`, as
    ``diffeqsolve`` does for the solver it is given (it cannot see the legs' solvers)."""
    root_finder = getattr(solver, "root_finder", None)
    if root_finder is None:
        return solver
    names = [name for name in ("rtol", "atol", "norm")
             if getattr(root_finder, name, None) is use_stepsize_tol]
    if not names:
        return solver
    return eqx.tree_at(lambda s: tuple(getattr(s.root_finder, n) for n in names), solver,
                       tuple(getattr(controller, n) for n in names))


def _zeros(structs):
    """Zeros of the shapes and dtypes of `structs` (a PyTree of ``jax.ShapeDtypeStruct``)."""
    return jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), structs)


class LastStep(eqx.Module):
    """The last accepted step of a solve: its ends and its dense output (as the `LegSolver`'s
    step returns it). Before the first step, the zero-length step at the initial state, whose
    interpolation is that state."""

    t0: Array
    t1: Array
    dense: dict

    def interpolation(self):
        return _interpolation(t0=self.t0, t1=self.t1, **self.dense)


class LegSolver(dfx.AbstractAdaptiveSolver):
    """The step of ``solvers[leg]`` (`leg`: the segment's leg, traced, the same for every
    member of a vmapped batch). The solvers must share the vector field (ODE terms); the error
    order for step-size control is the smallest of theirs (Tsit5 and Kvaerno5: both 5)."""

    solvers: tuple
    leg: Array

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = staticmethod(_interpolation)

    def order(self, terms):
        return min(solver.order(terms) for solver in self.solvers)

    def error_order(self, terms):
        return min(solver.error_order(terms) for solver in self.solvers)

    def init(self, terms, t0, t1, y0, args):
        states = tuple(solver.init(terms, t0, t1, y0, args) for solver in self.solvers)
        # The dense output of a step that stays at y0 (Diffrax's Runge–Kutta dense output:
        # the ends y0, y1 and the stages k).
        infos = tuple({key: (y0 if key in ("y0", "y1") else _zeros(part))
                       for key, part in shape.items()}
                      for shape in self._dense_shapes(terms, t0, t1, y0, args, states))
        t0 = jnp.asarray(t0)
        return states, LastStep(t0=t0, t1=t0, dense=self._dense(infos))

    def func(self, terms, t0, y0, args):
        return self.solvers[0].func(terms, t0, y0, args)

    def _dense_shapes(self, terms, t0, t1, y0, args, states, made_jump=False):
        return [jax.eval_shape(lambda s=solver, st=state: s.step(
            terms, t0, t1, y0, args, st, made_jump))[2]
            for solver, state in zip(self.solvers, states, strict=True)]

    def _dense(self, infos):
        classes = tuple(solver.interpolation_cls for solver in self.solvers)
        return dict(leg=jnp.asarray(self.leg), dense=_LegDense(infos=infos, classes=classes))

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        solver_state, _ = solver_state
        zero_dense = [_zeros(shape) for shape in self._dense_shapes(
            terms, t0, t1, y0, args, solver_state, made_jump)]

        def branch(i):
            def take():
                y1, y_error, dense, state, result = self.solvers[i].step(
                    terms, t0, t1, y0, args, solver_state[i], made_jump)
                # Only this leg's state advances (its FSAL stage is its own solver's).
                states = solver_state[:i] + (state,) + solver_state[i + 1:]
                denses = tuple(zero_dense[:i]) + (dense,) + tuple(zero_dense[i + 1:])
                return y1, y_error, denses, states, result
            return take

        y1, y_error, denses, state, result = jax.lax.switch(
            self.leg, [branch(i) for i in range(len(self.solvers))])
        dense = self._dense(denses)
        last = LastStep(t0=jnp.asarray(t0), t1=jnp.asarray(t1), dense=dense)
        return y1, y_error, dense, (state, last), result
