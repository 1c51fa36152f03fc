"""One Diffrax solver for every leg of the segment loop (`ibflow._segments.Leg`): each step is
the step of the current leg's solver (the explicit one, then the implicit tail), so a switching
flow's compiled program holds one ``diffeqsolve`` for both phases instead of one per phase: one
loop, one event function (inlined at three sites: a segment's start, a step's end, the event
root finder) and one event root finder (benchmarks/results/compile_ops.md).

A segment lies within one leg (a hand-over to the next leg ends a segment, like a switch), so a
solve never changes method between steps: the solver's state holds each leg's own, and only the
current leg's advances. Each leg's step sits behind a ``lax.cond`` on whether any member of a
vmapped batch is in that leg (``unvmap_any``): a batch whose members are all in one leg runs
that leg's step alone; a batch in both legs runs both and keeps each member's own.
"""

from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from diffrax._root_finder import use_stepsize_tol
from jaxtyping import Array


def _pick(leg, values):
    """``values[leg]``, leaf by leaf (a select: `leg` may be batched)."""
    out = values[0]
    for i, value in enumerate(values[1:], start=1):
        out = jax.tree_util.tree_map(lambda v, o, i=i: jnp.where(leg == i, v, o), value, out)
    return out


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
        return _pick(self.leg, [part.evaluate(t0, t1, left) for part in self.parts])


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


class LegSolver(dfx.AbstractAdaptiveSolver):
    """The step of ``solvers[leg]`` (`leg`: the member's current leg, traced; under ``vmap``
    each member's own). The solvers must share the vector field (ODE terms); the error order
    for step-size control is the smallest of theirs (Tsit5 and Kvaerno5: both 5)."""

    solvers: tuple
    leg: Array

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = staticmethod(_interpolation)

    def order(self, terms):
        return min(solver.order(terms) for solver in self.solvers)

    def error_order(self, terms):
        return min(solver.error_order(terms) for solver in self.solvers)

    def init(self, terms, t0, t1, y0, args):
        return tuple(solver.init(terms, t0, t1, y0, args) for solver in self.solvers)

    def func(self, terms, t0, y0, args):
        return self.solvers[0].func(terms, t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        outs = []
        for i, solver in enumerate(self.solvers):
            def take(solver=solver, state=solver_state[i]):
                return solver.step(terms, t0, t1, y0, args, state, made_jump)

            zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                           jax.eval_shape(take))
            outs.append(jax.lax.cond(eqxi.unvmap_any(self.leg == i), take, lambda z=zeros: z))
        y1, y_error, result = _pick(self.leg, [(out[0], out[1], out[4]) for out in outs])
        # Only the current leg's state advances (a leg's FSAL stage is its own solver's).
        state = tuple(
            jax.tree_util.tree_map(lambda new, old, i=i: jnp.where(self.leg == i, new, old),
                                   out[3], old)
            for i, (old, out) in enumerate(zip(solver_state, outs, strict=True)))
        dense_info = dict(leg=self.leg, dense=_LegDense(
            infos=tuple(out[2] for out in outs),
            classes=tuple(solver.interpolation_cls for solver in self.solvers)))
        return y1, y_error, dense_info, state, result
