"""Degenerate but valid inputs on the default diagonal-net path (the reduction with the Newton
tail): a tiny scale, repeated rows of X, a start that already meets the target. Each has a
limit; the default path must reach it, checked against a second route to the same limit."""

import jax.numpy as jnp
import numpy as np

import ibflow

from .helpers import relative


def _setup():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 12))
    return X, X[:, 0] + X[:, 1]


def _minimizer(model, X, y):
    m = ibflow.minimize_regularizer(ibflow.implicit_bias(model), X, y, throw=False)
    assert m.status == ibflow.Status.converged
    return m.w


def test_tiny_scale_converges_by_newton():
    """α = 1e-12: −F' ~ α at the start, so the first Newton step in ν is ~1e12 long and every
    halving of it overflowed; the tail stalled at the initial loss. The limit is checked
    against the parameter-space flow (no reduction, no Newton)."""
    X, y = _setup()
    model = ibflow.DiagonalNet.from_scale_shape(1e-12, 0.0, dim=12)
    sol = ibflow.integrate(model, X, y, throw=False)
    assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    assert int(sol.steps) < 100
    path = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace())
    assert relative(sol.predictor, path.predictor) <= 1e-8
    # Theorem 1 at this scale is close to min ℓ1; the parameter-space flow is the reference
    # above, the Theorem-1 minimizer a second one where it converges.
    w = _minimizer(model, X, y)
    assert relative(sol.predictor, w) <= 1e-8


def test_duplicated_rows_reach_the_limit_without_the_copies():
    """Repeated consistent rows make X Xᵀ singular (the Cholesky factor is not finite); the
    flow is still well defined and its limit is that of the data without the copies."""
    X, y = _setup()
    model = ibflow.DiagonalNet.from_scale_shape(1e-2, 0.0, dim=12)
    Xd, yd = np.vstack([X, X[:2]]), np.r_[y, y[:2]]
    sol = ibflow.integrate(model, Xd, yd, throw=False)
    assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    assert int(sol.steps) < 100
    plain = ibflow.integrate(model, X, y)
    assert relative(sol.predictor, plain.predictor) <= 1e-10
    assert relative(sol.predictor, _minimizer(model, X, y)) <= 1e-10
    path = ibflow.integrate(model, Xd, yd, formulation=ibflow.ParameterSpace())
    assert relative(sol.predictor, path.predictor) <= 1e-8


def test_a_start_that_meets_the_target_takes_no_step():
    """y ≡ 0 with a zero initial predictor (exactly: v = 0, so no rounding can make it
    nonzero): the default target is 0 and the start already meets it. The loss event fires on
    a crossing, which never came, so the solve used to run its whole 100 000-step budget."""
    u = jnp.full(12, 0.1)
    model = ibflow.DiagonalNet(u, jnp.zeros(12), u, jnp.zeros(12))
    X, _ = _setup()
    y = np.zeros(5)
    for options in ({}, dict(target_loss=0.0)):  # Newton tail; integrated tail
        sol = ibflow.integrate(model, X, y, max_steps=1_000, throw=False, **options)
        assert sol.status == ibflow.Status.converged, (options, ibflow.Status[sol.status])
        assert int(sol.steps) == 0
        np.testing.assert_array_equal(np.asarray(sol.predictor), 0.0)
