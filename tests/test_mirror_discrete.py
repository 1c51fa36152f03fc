"""Optax GD / mirror descent: as the step shrinks the iterates approach the flow."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import ibflow as ib


class _Linear(ib.AbstractLinearModel):
    theta: jax.Array

    def predictor(self):
        return self.theta

    def invariants(self):
        return {}


def test_mirror_descent_approaches_mirror_flow(getkey):
    X = jax.random.normal(getkey(), (3, 6))
    y = 2.0 * jax.random.normal(getkey(), (3,))
    model = _Linear(0.5 * jax.random.normal(getkey(), (6,)))
    phi = ib.QuarticPotential()
    # Compare at a finite time T = η·steps (path), then at the limit.
    T = 2.0
    flow = ib.integrate(model, X, y, flow=ib.MirrorFlow(phi), save_at=jnp.array([T]))
    at_T = flow.trajectory.predictor[0]
    errors = []
    for eta in [0.02, 0.01, 0.005]:
        res = ib.descend(model, X, y, optimizer=ib.mirror_descent(phi, learning_rate=eta),
                         num_steps=int(round(T / eta)))
        errors.append(float(jnp.max(jnp.abs(res.model.predictor() - at_T))))
    # first-order method: halving the step halves the error
    assert errors[0] > errors[1] > errors[2]
    np.testing.assert_allclose(errors[0] / errors[1], 2.0, rtol=0.1)
    np.testing.assert_allclose(errors[1] / errors[2], 2.0, rtol=0.1)
    # the limit of mirror descent is the flow's (same Bregman projection, docs/theory §2.1 item 5)
    res = ib.descend(model, X, y, optimizer=ib.mirror_descent(phi, learning_rate=0.05),
                     num_steps=20000)
    assert float(res.losses[-1]) < 1e-24
    np.testing.assert_allclose(res.model.predictor(), flow.predictor, atol=1e-9)
    # GD with a small step approaches gradient flow's limit too
    gd = ib.descend(model, X, y, optimizer=optax.sgd(0.05), num_steps=20000)
    gf = ib.integrate(model, X, y)
    np.testing.assert_allclose(gd.model.predictor(), gf.predictor, atol=1e-9)
    assert float(gd.losses[-1]) < 1e-24


def _numpy_gd(theta, X, y, eta, steps):
    """Independent reference: plain numpy GD on L = ‖Xθ − y‖²/(2n), ∇L = Xᵀ(Xθ − y)/n."""
    X, y, theta = np.asarray(X), np.asarray(y), np.array(theta)
    losses = []
    for _ in range(steps):
        r = X @ theta - y
        losses.append(0.5 * np.mean(r**2))
        theta = theta - eta * X.T @ r / len(y)
    return theta, np.array(losses)


def test_descend_matches_numpy_loop_and_reports_status(getkey):
    X = jax.random.normal(getkey(), (3, 6))
    y = jax.random.normal(getkey(), (3,))
    theta0 = 0.3 * jax.random.normal(getkey(), (6,))
    res = ib.descend(_Linear(theta0), X, y, optimizer=optax.sgd(0.1), num_steps=50)
    theta, losses = _numpy_gd(theta0, X, y, 0.1, 50)
    np.testing.assert_allclose(res.model.theta, theta, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.losses, losses, rtol=1e-12)
    np.testing.assert_allclose(res.loss, 0.5 * np.mean((np.asarray(X) @ theta - y) ** 2),
                               rtol=1e-12)
    # No target: nothing to converge to, every step taken.
    assert res.status == ib.Status.budget_exhausted and not bool(res.converged)
    assert int(res.steps) == 50


@pytest.mark.parametrize("target, steps, converged", [(1e-6, 400, True), (1e-6, 5, False)])
def test_descend_target_loss_status_and_stop(getkey, target, steps, converged):
    X = jax.random.normal(getkey(), (3, 6))
    y = jax.random.normal(getkey(), (3,))
    theta0 = 0.3 * jax.random.normal(getkey(), (6,))
    res = ib.descend(_Linear(theta0), X, y, optimizer=optax.sgd(0.2), num_steps=steps,
                     target_loss=target)
    _, losses = _numpy_gd(theta0, X, y, 0.2, steps + 1)
    # converged exactly when the final loss is at or below the target
    assert bool(res.converged) == converged == bool(res.loss <= target)
    assert res.status == (ib.Status.converged if converged else ib.Status.budget_exhausted)
    # the descent stops at the first iterate at or below the target (numpy reference)
    below = np.flatnonzero(losses <= target)
    expected_steps = int(below[0]) if below.size else steps
    assert int(res.steps) == expected_steps
    theta, _ = _numpy_gd(theta0, X, y, 0.2, expected_steps)
    np.testing.assert_allclose(res.model.theta, theta, rtol=1e-10, atol=1e-14)


def test_descend_nonfinite_status(getkey):
    X = 10.0 * jax.random.normal(getkey(), (3, 6))
    y = jax.random.normal(getkey(), (3,))
    res = ib.descend(_Linear(jnp.ones(6)), X, y, optimizer=optax.sgd(10.0), num_steps=2000,
                     target_loss=1e-8)
    assert not np.isfinite(float(res.loss))
    assert res.status == ib.Status.nonfinite and not bool(res.converged)


def test_descend_adam_under_strict_promotion(getkey):
    """Optax's int32 step counts meet float64 parameters (strict promotion is on in the tests)."""
    X = jax.random.normal(getkey(), (3, 6))
    y = jax.random.normal(getkey(), (3,))
    res = ib.descend(_Linear(jnp.zeros(6)), X, y, optimizer=optax.adam(0.05), num_steps=3000,
                     target_loss=1e-12)
    assert bool(res.converged)
    np.testing.assert_allclose(np.asarray(X) @ np.asarray(res.model.theta), y, atol=1e-5)


def test_descend_bad_options():
    model, X, y = _Linear(jnp.zeros(4)), jnp.eye(2, 4), jnp.ones(2)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="target_loss"):
            ib.descend(model, X, y, optimizer=optax.sgd(0.1), num_steps=3, target_loss=bad)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="num_steps"):
            ib.descend(model, X, y, optimizer=optax.sgd(0.1), num_steps=bad)


_TRACES = []


class _CountingSquareLoss(ib.AbstractLoss):
    """Half mean squared error that records each time it is traced."""

    def __call__(self, outputs, targets):
        _TRACES.append(1)
        return 0.5 * jnp.mean((outputs - targets) ** 2)


def test_descend_target_loss_is_traced(getkey):
    """A new target (or new data of the same shape) reuses the compiled descent."""
    X = jax.random.normal(getkey(), (3, 6))
    y = jax.random.normal(getkey(), (3,))
    model, loss = _Linear(jnp.zeros(6)), _CountingSquareLoss()
    sgd = optax.sgd(0.2)
    first = ib.descend(model, X, y, optimizer=sgd, num_steps=50, loss=loss, target_loss=1e-3)
    traced = len(_TRACES)
    assert traced > 0
    for target in (1e-4, 2e-5):
        res = ib.descend(model, X, 2.0 * y, optimizer=sgd, num_steps=50, loss=loss,
                         target_loss=target)
    assert len(_TRACES) == traced
    assert float(first.loss) <= 1e-3 and float(res.loss) <= 2e-5
