"""Flows that end at a stationary point above their target (docs/theory §8.3): `Status.stationary`,
its Newton polish, and the cases that must not trigger it (interpolating flows, plateaus near
the saddle at 0). References: dense ``jax.hessian`` eigenvalues, ``jax.grad``, and gradient
descent with Richardson extrapolation ``2·θ(η/2) − θ(η)`` (docs/theory §8.2)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import ibflow

from .helpers import every_flow


def _teacher_data():
    """A width-3 tanh teacher (scale 2) on 12 Gaussian inputs in d = 2: a width-1 student cannot
    interpolate it, so its flows end at positive loss."""
    teacher = ibflow.MLP.from_scale_shape(2.0, dim=2, widths=(3,), activation=ibflow.Tanh(),
                                          bias=True, key=jax.random.PRNGKey(0))
    return ibflow.data.teacher_student(jax.random.PRNGKey(0), n=12, d=2, teacher=teacher)


def _student(width, seed):
    return ibflow.MLP.from_scale_shape(1.0, dim=2, widths=(width,), activation=ibflow.Tanh(),
                                       bias=True, key=jax.random.PRNGKey(seed))


def _flat_loss(model, X, y):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    theta, unravel = ravel_pytree(params)

    def loss(t):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(unravel(t), static))(X) - y) ** 2)

    return theta, loss


def _gd_richardson(model, X, y, eta, steps):
    """GD at step η and η/2 (twice the steps), extrapolated: removes GD's O(η) error."""
    def gd(lr, n):
        res = ibflow.descend(model, X, y, optimizer=optax.sgd(lr), num_steps=n)
        return ravel_pytree(eqx.filter(res.model, eqx.is_inexact_array))[0]

    return 2 * gd(eta / 2, 2 * steps) - gd(eta, steps)


def test_spurious_minimum_ends_stationary_at_roundoff():
    data = _teacher_data()
    student = _student(1, 0)
    sol = ibflow.integrate(student, data.X, data.y, throw=False)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    assert float(sol.loss) > 1e3 * float(sol.target_loss)
    assert np.isinf(float(sol.time))  # the limit, as Newton's tail reports it
    theta, loss = _flat_loss(sol.model, data.X, data.y)
    theta0, _ = _flat_loss(student, data.X, data.y)
    g0 = np.linalg.norm(jax.grad(loss)(theta0))
    assert np.linalg.norm(jax.grad(loss)(theta)) <= 1e-13 * g0
    eigenvalues = np.linalg.eigvalsh(np.asarray(jax.hessian(loss)(theta)))
    assert eigenvalues[0] > 0  # an isolated (strict) minimum, not a saddle
    cert = ibflow.certify(sol.model, data.X, data.y)
    assert cert.verdict == "minimum"
    np.testing.assert_allclose(cert.hessian_min, eigenvalues[0], rtol=1e-8)
    # Gradient descent reaches the same point (an isolated minimum, λ_min ≈ 0.06: 10⁵ steps of
    # 0.1 contract the distance by e^{-500}), extrapolated as in test_mlp.py.
    reference = _gd_richardson(student, data.X, data.y, 0.1, 100_000)
    np.testing.assert_allclose(theta, reference, atol=1e-7)


def test_symmetric_start_reaches_a_saddle_and_says_so():
    """Two identical hidden neurons (each carrying half the output weight) stay identical under
    the flow: it converges inside that symmetric subspace, to a point where splitting the
    neurons would lower the loss, a saddle of the full space."""
    data = _teacher_data()
    one = _student(1, 1)
    (w1, w2), (b1, b2) = one.weights, one.biases
    twin = ibflow.MLP(weights=(jnp.concatenate([w1, w1]), jnp.concatenate([w2, w2], 1) / 2),
                      biases=(jnp.concatenate([b1, b1]), b2), activation=ibflow.Tanh())
    sol = ibflow.integrate(twin, data.X, data.y, throw=False)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    first = sol.model.weights[0]
    np.testing.assert_allclose(first[0], first[1], rtol=1e-12)
    theta, loss = _flat_loss(sol.model, data.X, data.y)
    assert np.linalg.norm(jax.grad(loss)(theta)) < 1e-14
    eigenvalues = np.linalg.eigvalsh(np.asarray(jax.hessian(loss)(theta)))
    assert eigenvalues[0] < -1e-6 * eigenvalues[-1]
    cert = ibflow.certify(sol.model, data.X, data.y)
    assert cert.verdict == "saddle" and bool(cert.saddle) and not bool(cert.minimum)
    np.testing.assert_allclose(cert.hessian_min, eigenvalues[0], rtol=1e-8)
    # Inside the symmetric subspace the net is a width-1 student (one neuron, the summed output
    # weight), so the limit is a stationary point of the width-1 student: here the one its own
    # flow finds (an independent run of another model), up to tanh's sign symmetry (w, b, a)
    # → (−w, −b, −a), which leaves the function unchanged.
    single = ibflow.integrate(one, data.X, data.y, throw=False)
    assert single.status == ibflow.Status.stationary
    np.testing.assert_allclose(jax.vmap(sol.model)(data.X), jax.vmap(single.model)(data.X),
                               atol=1e-9)
    np.testing.assert_allclose(np.abs(first[0]), np.abs(single.model.weights[0][0]), atol=1e-8)


def test_start_at_a_stationary_point_does_not_move():
    """All weights 0 (no biases): every gradient vanishes, so the flow stays there."""
    data = _teacher_data()
    zero = ibflow.MLP(weights=(jnp.zeros((3, 2)), jnp.zeros((1, 3))), biases=None,
                      activation=ibflow.Tanh())
    sol = ibflow.integrate(zero, data.X, data.y, throw=False)
    assert sol.status == ibflow.Status.stationary
    assert int(sol.steps) == 0
    for leaf in jax.tree_util.tree_leaves(eqx.filter(sol.model, eqx.is_inexact_array)):
        assert not np.any(np.asarray(leaf))
    # A saddle: the Hessian couples the two layers (∂²L/∂W₂∂W₁ = −mean(r x) tanh'(0) ≠ 0).
    assert ibflow.certify(sol.model, data.X, data.y).verdict == "saddle"


def test_interpolating_flows_still_converge_and_vmap_keeps_each_status():
    """A width-1 student on a teacher it can fit converges (the stationarity test is scaled by
    the loss's fall); batched with a student that cannot fit, each keeps its own status."""
    data = _teacher_data()
    fit = ibflow.MLP.from_scale_shape(1.0, dim=2, widths=(1,), activation=ibflow.Tanh(),
                                      bias=True, key=jax.random.key(0))
    y_fit = jax.vmap(_student(1, 7))(data.X)  # realizable by the width-1 student
    models = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), fit)
    ys = jnp.stack([y_fit, data.y])

    def run(model, y):
        return ibflow.integrate(model, data.X, y, throw=False)

    batched = eqx.filter_jit(eqx.filter_vmap(run))(models, ys)
    loop = [run(fit, y_fit), run(fit, data.y)]
    assert loop[0].status == ibflow.Status.converged, ibflow.Status[loop[0].status]
    assert loop[1].status == ibflow.Status.stationary, ibflow.Status[loop[1].status]
    for i, sol in enumerate(loop):
        assert int(batched.status._value[i]) == int(sol.status._value)
        for a, b in zip(jax.tree_util.tree_leaves(eqx.filter(sol.model, eqx.is_inexact_array)),
                        jax.tree_util.tree_leaves(eqx.filter(batched.model,
                                                             eqx.is_inexact_array))):
            np.testing.assert_allclose(b[i], a, rtol=1e-6, atol=1e-8)


def test_small_initialization_plateau_is_not_stationary():
    """A diagonal net at α = 1e-5 in parameter space starts next to the saddle at 0 (a tiny,
    growing field): it must converge as before, to the reduction's limit (another algorithm:
    the n-dim dual ODE and Newton, docs/theory §2.3)."""
    X = jax.random.normal(jax.random.key(0), (5, 12))
    y = jax.random.normal(jax.random.key(1), (5,))
    model = ibflow.DiagonalNet.from_scale_shape(1e-5, 0.0, dim=12)
    sol = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace(), throw=False)
    assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    reduced = ibflow.integrate(model, X, y)
    err = np.linalg.norm(sol.predictor - reduced.predictor) / np.linalg.norm(reduced.predictor)
    assert err < 1e-8, err


def test_stationary_code_is_appended_last():
    """Stored sweep files keep their codes: the new item comes after every earlier one."""
    from ibflow._status import STATUS_NAMES, status_code

    assert STATUS_NAMES[-1] == "stationary"
    assert status_code("not_computed") == len(STATUS_NAMES) - 2


@pytest.mark.parametrize("name", ["mirror", "warped", "loss-clock"])
def test_other_flows_end_stationary_on_their_own_field(name):
    """The test reads each flow's own unit-speed field −P∇L (a mirror preconditioner; a warp or
    loss clock only rescales it): each ends `stationary` at a critical point to round-off,
    here the same isolated minimum gradient flow reaches."""
    data = _teacher_data()
    student = _student(1, 0)
    sol = ibflow.integrate(student, data.X, data.y, flow=every_flow()[name], throw=False)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    theta, loss = _flat_loss(sol.model, data.X, data.y)
    theta0, _ = _flat_loss(student, data.X, data.y)
    assert np.linalg.norm(jax.grad(loss)(theta)) <= 1e-13 * np.linalg.norm(
        jax.grad(loss)(theta0))
    assert ibflow.certify(sol.model, data.X, data.y).verdict == "minimum"
    gradient = ibflow.integrate(student, data.X, data.y, throw=False)
    np.testing.assert_allclose(jax.vmap(sol.model)(data.X), jax.vmap(gradient.model)(data.X),
                               atol=1e-10)


def test_matrix_free_newton_polishes_too(monkeypatch):
    """Above `DENSE_HESSIAN_MAX` parameters the polish solves with GMRES on Hessian–vector
    products; forced here on a small problem (11 examples: a shape no other test compiles, so
    the solve is traced anew under the patched threshold)."""
    import ibflow._engine as engine

    monkeypatch.setattr(engine, "DENSE_HESSIAN_MAX", 1)
    data = _teacher_data()
    X, y = data.X[:11], data.y[:11]
    student = _student(1, 0)
    sol = ibflow.integrate(student, X, y, throw=False)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    theta, loss = _flat_loss(sol.model, X, y)
    theta0, _ = _flat_loss(student, X, y)
    assert np.linalg.norm(jax.grad(loss)(theta)) <= 1e-13 * np.linalg.norm(
        jax.grad(loss)(theta0))


def test_tail_ends_stationary_too():
    """A switch level above the spurious minimum's loss hands the flow to the implicit tail
    before it comes to rest: the tail's own stationarity test ends it there (it ran to its
    budget before), at the point the explicit phase finds alone."""
    data = _teacher_data()
    student = _student(1, 0)
    scale = 0.5 * float(np.mean(np.asarray(data.y) ** 2))
    alone = ibflow.integrate(student, data.X, data.y, throw=False)
    theta, loss = _flat_loss(student, data.X, data.y)
    g0 = np.linalg.norm(jax.grad(loss)(theta))
    switch = 3 * float(alone.loss) / scale
    sol = ibflow.integrate(student, data.X, data.y, stiff_switch=switch, throw=False)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    assert float(sol.loss) < switch * scale  # the tail ran
    # With the exact Jacobian far from interpolation (Gauss–Newton alone drops the residual
    # curvature that is not small here: ~43 000 steps).
    assert int(sol.steps) < 5000
    end, _ = _flat_loss(sol.model, data.X, data.y)
    assert np.linalg.norm(jax.grad(loss)(end)) <= 1e-13 * g0
    np.testing.assert_allclose(end, _flat_loss(alone.model, data.X, data.y)[0], rtol=0,
                               atol=1e-10 * np.linalg.norm(end))
