"""`damped_newton`, ibflow's one damped Newton loop (the minimizer's dual, the variational solvers
and the equilibrium tail call it), against scipy.optimize: a convex minimization with the
`Armijo` search and a root problem with the `Decrease` search, under jit and vmap; and the
statuses it reports when it cannot converge."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jaxtyping import Array

from ibflow._newton import (
    AbstractNewtonProblem,
    Armijo,
    Decrease,
    Direction,
    Point,
    damped_newton,
)
from ibflow._status import Status


class _ExpSum(AbstractNewtonProblem):
    """``min Σᵢ exp(aᵢ·x) − ⟨b, x⟩``: smooth and strictly convex (A of full column rank); its
    quadratic model underestimates the exponentials' growth, so from far below the minimum a
    full Newton step overshoots by orders of magnitude. With ``b = Aᵀexp(Ax*)`` the minimizer
    is x*. `aux`: the gradient. `flip` multiplies the direction (−1: uphill, nan: non-finite).
    The memo counts the damped steps (accepted with t < 1)."""

    A: Array
    b: Array
    flip: float = 1.0

    def evaluate(self, x):
        e = jnp.exp(self.A @ x)
        return jnp.sum(e) - self.b @ x, self.A.T @ e - self.b

    def trial(self, point, direction, t):
        x = point.x + t * direction.step
        return Point(x, *self.evaluate(x))

    def direction(self, point, memo):
        hess = self.A.T @ (jnp.exp(self.A @ point.x)[:, None] * self.A)
        step = -self.flip * jnp.linalg.solve(hess, point.aux)
        return Direction(step=step, slope=point.aux @ step)

    def converged(self, point, memo):
        # Componentwise, against the round-off scale of the gradient's sum.
        scale = jnp.abs(self.A.T) @ jnp.exp(self.A @ point.x) + jnp.abs(self.b)
        return jnp.all(jnp.abs(point.aux) <= 1e-13 * scale)

    def refine(self, previous, point, accepted, t, direction, status):
        return point, previous.memo + jnp.where(accepted & (t < 1), 1, 0), status


def _exp_data(seed, m=12, d=5):
    """``(A, b, x*, x₀)``: x* the minimizer, x₀ = −x* the start (far below the minimum: a
    damped path)."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    A = jax.random.normal(k1, (m, d)) / jnp.sqrt(d)
    minimum = 1.5 * jax.random.normal(k2, (d,))
    return A, A.T @ jnp.exp(A @ minimum), minimum, -minimum


def _exp_scipy(A, b, x0):
    A, b = np.asarray(A), np.asarray(b)
    res = scipy.optimize.minimize(
        lambda x: np.sum(np.exp(A @ x)) - b @ x, np.asarray(x0),
        jac=lambda x: A.T @ np.exp(A @ x) - b,
        hess=lambda x: A.T @ (np.exp(A @ x)[:, None] * A), method="trust-exact",
        options={"gtol": 1e-10})
    assert res.success, res.message
    return res.x


_ARMIJO = Armijo(c=1e-4, max_trials=60)


def _minimize(A, b, x0, flip=1.0, max_steps=100):
    return damped_newton(_ExpSum(A, b, flip), x0, search=_ARMIJO, max_steps=max_steps,
                         memo=jnp.array(0))


def test_convex_minimum_matches_scipy_and_the_closed_form_under_jit():
    A, b, minimum, x0 = _exp_data(2)
    out = jax.jit(_minimize)(A, b, x0)
    assert out.status == Status.converged
    assert int(out.memo) >= 1  # far from the minimum: some steps were damped
    np.testing.assert_allclose(out.point.x, minimum, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.point.x, _exp_scipy(A, b, x0), rtol=1e-9, atol=1e-9)


def test_convex_minima_under_vmap_equal_scipy_and_each_member_alone():
    A, b, minimum, x0 = (jnp.stack(v) for v in zip(*(_exp_data(s) for s in (0, 2, 4, 6))))
    batch = jax.jit(jax.vmap(_minimize))(A, b, x0)
    assert len(set(np.asarray(batch.steps).tolist())) > 1  # members stop on their own
    for i in range(A.shape[0]):
        alone = jax.jit(_minimize)(A[i], b[i], x0[i])
        assert int(batch.status._value[i]) == int(Status.converged._value)
        assert int(batch.steps[i]) == int(alone.steps)
        np.testing.assert_allclose(batch.point.x[i], alone.point.x, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(batch.point.x[i], minimum[i], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(batch.point.x[i], _exp_scipy(A[i], b[i], x0[i]), rtol=1e-9,
                                   atol=1e-9)


@pytest.mark.parametrize("flip, max_steps, status", [
    (1.0, 1, Status.budget_exhausted),
    (1.0, 0, Status.budget_exhausted),
    (-1.0, 100, Status.line_search_failed),
    (float("nan"), 100, Status.singular),
])
def test_statuses_when_it_cannot_converge(flip, max_steps, status):
    A, b, _, x0 = _exp_data(2)
    out = _minimize(A, b, x0, flip, max_steps)
    assert out.status == status
    assert int(out.steps) == min(max_steps, 1)
    if status != Status.budget_exhausted or max_steps == 0:
        np.testing.assert_array_equal(out.point.x, x0)  # nothing accepted


class _ExpRoot(AbstractNewtonProblem):
    """The root of ``F(x) = c − Mx − eˣ`` (M symmetric positive definite: ``−F'`` is too), merit
    ``½‖F‖²``, ``aux = F``. From a point where eˣ is negligible, the Newton step is ~``M⁻¹c``,
    far past the root, where eˣ overflows: the search's overflow shrink brings it back."""

    M: Array
    c: Array

    def _field(self, x):
        return self.c - self.M @ x - jnp.exp(x)

    def evaluate(self, x):
        field = self._field(x)
        return 0.5 * field @ field, field

    def trial(self, point, direction, t):
        x = point.x + t * direction.step
        return Point(x, *self.evaluate(x))

    def direction(self, point, memo):
        jac = self.M + jnp.diag(jnp.exp(point.x))
        return Direction(step=jnp.linalg.solve(jac, point.aux))

    def converged(self, point, memo):
        return point.value <= 1e-26 * (1 + self.c @ self.c)

    def refine(self, previous, point, accepted, t, direction, status):
        return point, previous.memo, status


def _root_data(key, d=6):
    B = jax.random.normal(key, (d, d))
    return 1e-3 * (B @ B.T / d + jnp.eye(d))


def _root(M, c):
    return damped_newton(_ExpRoot(M, c), jnp.full(c.shape, -40.0),
                         search=Decrease(max_trials=31, overflow=2.0**-8), max_steps=200)


def _root_scipy(M, c):
    M, c = np.asarray(M), np.asarray(c)
    res = scipy.optimize.root(lambda x: c - M @ x - np.exp(x), np.log(c), method="hybr",
                              jac=lambda x: -M - np.diag(np.exp(x)), tol=1e-12)
    assert res.success, res.message
    return res.x


def test_root_matches_scipy_under_jit_and_vmap(getkey):
    M = _root_data(getkey())
    cs = jnp.exp(3 * jax.random.uniform(getkey(), (3, M.shape[0])))
    batch = jax.jit(jax.vmap(_root, in_axes=(None, 0)))(M, cs)
    for i, c in enumerate(cs):
        alone = jax.jit(_root)(M, c)
        assert alone.status == Status.converged
        assert int(batch.status._value[i]) == int(Status.converged._value)
        assert int(batch.steps[i]) == int(alone.steps)
        np.testing.assert_allclose(batch.point.x[i], alone.point.x, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(alone.point.x, _root_scipy(M, c), rtol=1e-10, atol=1e-12)
