"""The exact flow integrator against independent references (closed forms, scipy, invariants)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import ibflow
from ibflow._engine import traced_solve as _integrate

from .helpers import foundation_models, random_problem, relative


def test_linear_flow_is_matrix_exponential(getkey):
    # dw/dt = -(1/n) Xᵀ(Xw − y) is affine: [w; 1]' = [[-A, b], [0, 0]] [w; 1].
    X, y = random_problem(getkey())
    n, d = X.shape
    w0 = jax.random.normal(getkey(), (d,))
    ts = jnp.linspace(0.0, 5.0, 11)  # before the loss event ends the solve
    sol = ibflow.integrate(ibflow.LinearModel(w0), X, y, save_at=ts, rtol=1e-12)
    A, b = np.asarray(X.T @ X) / n, np.asarray(X.T @ y) / n
    gen = np.zeros((d + 1, d + 1))
    gen[:d, :d], gen[:d, d] = -A, b
    assert np.isfinite(sol.trajectory.predictor).all()
    for t, w_t in zip(np.asarray(ts), np.asarray(sol.trajectory.predictor)):
        expected = (scipy.linalg.expm(t * gen) @ np.append(np.asarray(w0), 1.0))[:d]
        assert np.linalg.norm(w_t - expected) <= 1e-10 * np.linalg.norm(expected)


def test_linear_regression_from_zero_reaches_min_l2(getkey):
    X, y = random_problem(getkey())
    sol = ibflow.integrate(ibflow.LinearModel(jnp.zeros(40)), X, y)
    assert sol.status == ibflow.Status.converged
    reference = np.linalg.lstsq(np.asarray(X), np.asarray(y), rcond=None)[0]  # min-norm (numpy)
    assert relative(sol.predictor, jnp.asarray(reference)) <= 1e-10


@pytest.mark.parametrize("name", ["diagonal-unbiased", "diagonal-biased", "fc-width1",
                                  "fc-width3", "leaky"])
def test_invariants_are_conserved(name, getkey):
    X, y = random_problem(getkey())
    model = foundation_models(getkey(), 40)[name]
    if name == "leaky":  # a > 0, δ > 0, y > 0: no pre-activation slides along its kink
        model = eqx.tree_at(lambda m: m.a, model, jnp.abs(model.a))
        y = jnp.abs(y) + 0.1
    ts = jnp.linspace(0.0, 5.0, 11)
    sol = ibflow.integrate(model, X, y, save_at=ts, formulation=ibflow.ParameterSpace(),
                           rtol=1e-12, throw=False)
    for leaf0, leaf_t in zip(jax.tree_util.tree_leaves(model.invariants()),
                             jax.tree_util.tree_leaves(sol.trajectory.invariants)):
        valid = jnp.isfinite(leaf_t.reshape(len(ts), -1)).all(axis=1)
        assert valid.sum() >= 6
        drift = jnp.max(jnp.abs(leaf_t[valid] - leaf0))
        assert drift <= 1e-9 * jnp.max(jnp.abs(leaf0))


def _arcsinh_residual(model, w, X):
    """Distance of arcsinh(2w/k) − arcsinh(2w₀/k) from range Xᵀ, relative (docs/theory §2.3)."""
    p, m = model.exp_coefficients()
    k = 4 * jnp.sqrt(p * m)  # k = 2 sqrt(K² − w0²) and K² − w0² = 4PN
    z = jnp.arcsinh(2 * w / k) - jnp.arcsinh(2 * model.predictor() / k)
    projected = X.T @ jnp.linalg.solve(X @ X.T, X @ z)
    return float(jnp.linalg.norm(z - projected) / jnp.linalg.norm(z))


@pytest.mark.parametrize("seed", range(3))
def test_diagonal_limit_satisfies_invariant_form(seed):
    key = jax.random.key(100 + seed)
    kp, ka, ks, kb = jax.random.split(key, 4)
    X, y = random_problem(kp)
    unbiased = ibflow.DiagonalNet.from_scale_shape(
        10 ** jax.random.uniform(ka, (40,), minval=-2, maxval=0),
        jax.random.uniform(ks, (40,), minval=-0.9, maxval=0.9))
    biased = ibflow.DiagonalNet(*(0.5 * jax.random.normal(kb, (4, 40))))
    for model in (unbiased, biased):
        sol = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace())
        assert sol.status == ibflow.Status.converged
        assert _arcsinh_residual(model, sol.predictor, X) <= 1e-8


def test_reduced_and_parameter_dynamics_agree(getkey):
    X, y = random_problem(getkey())
    model = ibflow.DiagonalNet(*(0.2 * jax.random.normal(getkey(), (4, 40))))
    reduced = ibflow.integrate(model, X, y, formulation=ibflow.Reduction())
    full = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace())
    assert relative(reduced.predictor, full.predictor) <= 1e-9
    for a, b in zip(jax.tree_util.tree_leaves(reduced.model),
                    jax.tree_util.tree_leaves(full.model)):
        assert relative(a, b) <= 1e-8


def test_vmap_equals_loop_and_compiles_once(getkey):
    X, y = random_problem(getkey())
    scales = jnp.array([1e-3, 1e-2, 0.1, 1.0, 3.0])
    shapes = jnp.array([0.0, 0.5, -0.3, 0.9, 0.2])
    before = eqx.debug.get_num_traces(_integrate)
    loop = [ibflow.integrate(ibflow.DiagonalNet.from_scale_shape(a, s, dim=40), X, y)
            for a, s in zip(scales, shapes)]
    assert eqx.debug.get_num_traces(_integrate) - before <= 1  # five configurations, one trace
    models = eqx.filter_vmap(lambda a, s: ibflow.DiagonalNet.from_scale_shape(a, s, dim=40))(
        scales, shapes)
    batched = eqx.filter_vmap(lambda m: ibflow.integrate(m, X, y))(models)
    for i, sol in enumerate(loop):
        assert relative(batched.predictor[i], sol.predictor) <= 1e-12
        assert int(batched.steps[i]) == int(sol.steps)


def test_many_initializations_trace_once(getkey):
    X, y = random_problem(getkey())
    run = eqx.filter_jit(eqx.debug.assert_max_traces(
        lambda m: ibflow.integrate(m, X, y, throw=False), max_traces=1))
    for a in np.logspace(-3, 0, 100):
        run(ibflow.DiagonalNet.from_scale_shape(a, 0.1, dim=40))
    assert eqx.debug.get_num_traces(run) == 1


def test_plateau_of_small_initialization_is_crossed_in_few_steps():
    data = ibflow.data.sparse_regression(jax.random.key(3), n=10, d=40, k=3)
    sol = ibflow.integrate(ibflow.DiagonalNet.from_scale_shape(1e-8, 0.0, dim=40), data.X,
                           data.y)
    assert sol.status == ibflow.Status.converged
    assert sol.steps < 5000


def test_status_budget_and_nonfinite(getkey):
    X, y = random_problem(getkey())
    model = ibflow.DiagonalNet.from_scale_shape(0.1, 0.0, dim=40)
    short = ibflow.integrate(model, X, y, max_steps=1, throw=False)
    assert short.status == ibflow.Status.budget_exhausted
    with pytest.raises(Exception, match="did not converge"):
        ibflow.integrate(model, X, y, max_steps=1)
    broken = ibflow.DiagonalNet(*(jnp.full((4, 40), jnp.nan)))
    bad = ibflow.integrate(broken, X, y, throw=False, formulation=ibflow.ParameterSpace())
    assert bad.status == ibflow.Status.nonfinite


def test_one_failing_member_does_not_take_down_the_batch(getkey):
    X, y = random_problem(getkey())
    models = eqx.filter_vmap(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.0, dim=40))(
        jnp.array([0.1, 1.0]))
    models = eqx.tree_at(lambda m: m.u_plus, models, models.u_plus.at[1].set(jnp.nan))
    sol = eqx.filter_vmap(lambda m: ibflow.integrate(m, X, y, throw=False))(models)
    assert bool((sol.status == ibflow.Status.converged)[0])
    assert bool((sol.status == ibflow.Status.nonfinite)[1])
