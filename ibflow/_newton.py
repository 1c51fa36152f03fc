"""One damped Newton loop for every Newton solve in ibflow: the dual of `minimize_regularizer`,
the variational solvers (`abs_variational`) and the equilibrium tail (`EquilibriumNewton`).

A problem (`AbstractNewtonProblem`) owns its linear algebra: it evaluates a *merit* (what the
line search must decrease: an objective, or the loss whose minimum is a root of a vector field)
together with the data its next direction needs, builds the Newton direction from a
factorization of its choice (Cholesky, a Schur complement, a Levenberg–Marquardt shift), says
when it is done, and may `refine` the iterate after each line search (chord steps with the same
factor; a shift to retry with instead of failing). How far to step is a strategy passed by value
(`Armijo` or `Decrease`). The loop, its budget, its status and the line search's trial loop live
here, once.

Why not optimistix (0.1.0): its minimisers take one line-search trial per solver step and choose
between the accepted and the rejected branch with ``lax.cond``, which under ``vmap`` becomes a
select that builds and factorizes a new Jacobian at every trial of every member; the tail's
overflow shrink, Levenberg–Marquardt retry and chord steps have no place in its descent/search
split; and ``optx.Newton`` is an undamped root finder.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from ._batching import compacting_while_loop
from ._result import AbstractResult
from ._status import Status


class Point(eqx.Module):
    """An iterate `x` (n,), its merit `value` and the problem's data there (`aux`, e.g. a
    residual or a vector field: what the next direction needs)."""

    x: Float[Array, " n"]
    value: Float[Array, ""]
    aux: PyTree


class Direction(eqx.Module):
    """A Newton direction `step` (n,) from a point, the merit's derivative along it (`slope`, for
    `Armijo`), the merit's round-off allowance at the point (`slack`), and whatever the problem's
    `refine` needs from the factorization (`info`)."""

    step: Float[Array, " n"]
    slope: Float[ArrayLike, ""] = 0.0
    slack: Float[ArrayLike, ""] = 0.0
    info: PyTree = None


class NewtonResult(AbstractResult):
    """The loop's state, returned as its result: the last accepted `point`, the problem's `memo`
    (what it carries from one iteration to the next), the iterations taken (`steps`: one
    direction each) and a `Status`: `converged` (the problem's test holds), `budget_exhausted`,
    `line_search_failed` (no trial accepted), `singular` (a non-finite direction), `nonfinite`
    (a non-finite merit) or whatever the problem's `refine` set (e.g. `stalled`). While the loop
    runs the status is `budget_exhausted`."""

    point: Point
    memo: PyTree
    steps: Int[Array, ""]
    status: Status


class AbstractNewtonProblem(eqx.Module):
    """What `damped_newton` asks of a problem."""

    @abc.abstractmethod
    def evaluate(self, x: Float[Array, " n"]) -> tuple[Float[Array, ""], PyTree]:
        """``(merit, aux)`` at `x`."""

    @abc.abstractmethod
    def trial(self, point: Point, direction: Direction, t: Float[Array, ""]) -> Point:
        """The point ``point.x + t·direction.step`` with its merit and data (a problem may
        refuse a trial, e.g. where its Newton model means nothing there, by giving it merit
        ``+inf``)."""

    @abc.abstractmethod
    def direction(self, point: Point, memo: PyTree) -> Direction:
        """The Newton direction at `point`."""

    @abc.abstractmethod
    def converged(self, point: Point, memo: PyTree) -> Bool[Array, ""]:
        """The stopping test."""

    @abc.abstractmethod
    def refine(self, previous: NewtonResult, point: Point, accepted: Bool[Array, ""],
               t: Float[Array, ""], direction: Direction,
               status: Status) -> tuple[Point, PyTree, Status]:
        """After the line search from ``previous.point``: `point` is the accepted trial (the
        previous point where not `accepted`), `t` the last step length tried and `status` the
        loop's verdict (`budget_exhausted` to go on, `line_search_failed`, `singular`). Returns
        the iterate, the memo for the next iteration and the status (a problem may, e.g., take
        chord steps, or retry a failed search with another memo instead of failing)."""


class AbstractLineSearch(eqx.Module):
    """Trials at step lengths ``t = 1, shrink(1), …``, at most `max_trials`, until one is
    accepted."""

    max_trials: eqx.AbstractVar[int]

    @abc.abstractmethod
    def accept(self, point: Point, trial: Point, t: Float[Array, ""],
               direction: Direction) -> Bool[Array, ""]:
        """Whether `trial` (at step length `t`) is acceptable."""

    @abc.abstractmethod
    def shrink(self, t: Float[Array, ""], trial: Point) -> Float[Array, ""]:
        """The next step length after the rejected `trial` at `t`."""


class Armijo(AbstractLineSearch):
    """Halving until ``merit ≤ merit₀ + c·t·slope + slack`` (sufficient decrease, with the
    problem's round-off allowance), along a descent direction (``slope < 0``) and at a finite
    merit. For minimizing a smooth convex objective."""

    c: float
    max_trials: int

    def accept(self, point, trial, t, direction):
        return ((direction.slope < 0) & jnp.isfinite(trial.value)
                & (trial.value <= point.value + self.c * t * direction.slope + direction.slack))

    def shrink(self, t, trial):
        del trial
        return t / 2


class Decrease(AbstractLineSearch):
    """Any strict decrease of the merit; halving after a finite trial, shrinking by `overflow`
    after a non-finite one (a step far past the root of an exponential field overflows, and
    halvings alone would take many trials to come back)."""

    max_trials: int
    overflow: float

    def accept(self, point, trial, t, direction):
        del t, direction
        return trial.value < point.value

    def shrink(self, t, trial):
        return jnp.where(jnp.isfinite(trial.value), 0.5, self.overflow) * t


def _line_search(problem, search, point, direction, active):
    """Backtrack along `direction` from `point`. Members that are not `active` (done, or with a
    non-finite direction, in a vmapped batch) stop after the first trial: otherwise a finished
    member at its round-off floor would make its whole batch pay ``max_trials`` evaluations per
    iteration. Returns ``(last trial, its step length, accepted)``."""

    def more(search_state):
        t, trial, count = search_state
        return active & ~search.accept(point, trial, t, direction) & (count < search.max_trials)

    def shorter(search_state):
        t, trial, count = search_state
        t = search.shrink(t, trial)
        return t, problem.trial(point, direction, t), count + 1

    one = jnp.ones((), dtype=point.value.dtype)
    t, trial, _ = jax.lax.while_loop(
        more, shorter, (one, problem.trial(point, direction, one), jnp.array(1)))
    return trial, t, active & search.accept(point, trial, t, direction)


def _running(operands, state):
    problem, _, max_steps = operands
    return ((state.status == Status.budget_exhausted) & (state.steps < max_steps)
            & jnp.isfinite(state.point.value) & ~problem.converged(state.point, state.memo))


def _iterate(operands, state):
    problem, search, _ = operands
    direction = problem.direction(state.point, state.memo)
    finite = jnp.all(jnp.isfinite(direction.step))
    trial, t, accepted = _line_search(problem, search, state.point, direction,
                                      _running(operands, state) & finite)
    point = jax.tree_util.tree_map(lambda new, old: jnp.where(accepted, new, old),
                                   trial, state.point)
    status = Status.where(finite, Status.where(accepted, state.status,
                                               Status.line_search_failed), Status.singular)
    point, memo, status = problem.refine(state, point, accepted, t, direction, status)
    return NewtonResult(point=point, memo=memo, steps=state.steps + 1, status=status)


def damped_newton(problem: AbstractNewtonProblem, x0: Float[Array, " n"], *,
                  search: AbstractLineSearch, max_steps: Int[ArrayLike, ""],
                  memo: PyTree = None, compact: bool = False) -> NewtonResult:
    """Damped Newton's method on `problem` from `x0`: per iteration one `direction`, a line
    search (`search`) along it, and the problem's `refine`; until the problem has `converged`,
    a search fails, the merit is not finite or `max_steps` iterations (an int or an integer
    array: 0 runs none) are spent. `memo`: the problem's initial memo. Jittable; under ``vmap``
    each member stops on its own (its status says why). `compact`: under ``vmap``, members that
    are done stop costing work (`ibflow._batching.compacting_while_loop`); the loop is then not
    differentiable (run it on stopped gradients, as the equilibrium tail does), while the plain
    loop is forward-differentiable (``jax.jacfwd`` of `minimize_regularizer`)."""
    value, aux = problem.evaluate(x0)
    start = NewtonResult(point=Point(x=x0, value=value, aux=aux), memo=memo,
                         steps=jnp.array(0), status=Status.budget_exhausted)

    operands = (problem, search, max_steps)
    if compact:
        state = compacting_while_loop(_running, _iterate, start, operands)
    else:
        state = jax.lax.while_loop(lambda s: _running(operands, s),
                                   lambda s: _iterate(operands, s), start)
    status = Status.where(jnp.isfinite(state.point.value), state.status, Status.nonfinite)
    status = Status.where(problem.converged(state.point, state.memo), Status.converged, status)
    return NewtonResult(point=state.point, memo=state.memo, steps=state.steps, status=status)
