"""Classification flows on nearly orthogonal data (theory §4): the reduced flow against independent
references (full-parameter `integrate`, gradient descent, finite differences, scipy NNLS, numpy
SVD) and the low-rank / max-margin claims on small instances."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import ibflow
from ibflow.data import gaussian_mixture, near_orthogonality


@pytest.fixture(scope="module")
def mixture():
    return gaussian_mixture(jax.random.key(0), n=8, d=784)


@pytest.fixture(scope="module")
def leaky_run(mixture):
    """σ-sweep (vmapped, one compile) of the leaky-ReLU flow to loss 1e-6 in the log-loss clock."""
    sigmas = jnp.array([1e-4, 1e-3])
    models = eqx.filter_vmap(lambda s: ibflow.TwoLayerClassifier.init(
        dim=784, width=40, init_std=s, slope=0.1, key=jax.random.key(1)))(sigmas)
    sols = eqx.filter_vmap(lambda m: ibflow.classification_flow(
        m, mixture.X, mixture.y, target_loss=1e-6, num_save=12, throw=False))(models)
    return sols


def test_model_matches_formula_and_gradients(getkey):
    X = jax.random.normal(getkey(), (5, 7))
    for train_second, bias in [(False, False), (True, True)]:
        model = ibflow.TwoLayerClassifier.init(dim=7, width=6, init_std=0.5, slope=0.2,
                                               bias=bias, train_second=train_second, key=getkey())
        W, a = np.asarray(model.first), np.asarray(model.second)
        b = np.zeros(6) if model.bias is None else np.asarray(model.bias)
        pre = np.asarray(X) @ W.T + b
        expected = np.maximum(pre, 0.2 * pre) @ a
        np.testing.assert_allclose(jax.vmap(model)(X), expected, rtol=1e-13)
        np.testing.assert_allclose(np.abs(a), 1 / np.sqrt(6))
        grad = eqx.filter_grad(lambda m: jnp.sum(jax.vmap(m)(X)))(model)
        # The fixed second layer is a leaf but has zero gradient; the trained one does not.
        assert bool(jnp.all(grad.second == 0)) != train_second
        # Finite differences on one first-layer entry.
        eps = 1e-6
        bumped = eqx.tree_at(lambda m: m.first, model, model.first.at[2, 3].add(eps))
        fd = (jnp.sum(jax.vmap(bumped)(X)) - jnp.sum(jax.vmap(model)(X))) / eps
        np.testing.assert_allclose(grad.first[2, 3], fd, rtol=1e-5, atol=1e-8)
        assert model.invariants() == {} if not train_second else "balance" in model.invariants()


def test_bad_input_messages(getkey):
    with pytest.raises(ValueError, match="slope"):
        ibflow.TwoLayerClassifier.init(dim=3, width=2, slope=1.5, key=getkey())
    with pytest.raises(ValueError, match="even width"):
        ibflow.TwoLayerClassifier.init(dim=3, width=3, key=getkey())
    model = ibflow.TwoLayerClassifier.init(dim=3, width=2, key=getkey())
    with pytest.raises(ValueError, match="input dimension"):
        ibflow.classification_flow(model, jnp.ones((4, 5)), jnp.ones(4))
    with pytest.raises(ValueError, match="-1 or \\+1"):
        ibflow.classification_flow(model, jnp.ones((4, 3)), jnp.arange(4.0))
    with pytest.raises(ValueError, match="flow must be an ibflow flow"):
        ibflow.classification_flow(model, jnp.ones((4, 3)), jnp.ones(4), flow="time")


def test_stable_rank_and_near_orthogonality_against_numpy(getkey):
    W = np.asarray(jax.random.normal(getkey(), (6, 9)))
    s = np.linalg.svd(W, compute_uv=False)
    np.testing.assert_allclose(ibflow.stable_rank(W), np.sum(s**2) / s[0] ** 2, rtol=1e-12)
    np.testing.assert_allclose(ibflow.stable_rank(np.outer(np.arange(1.0, 7), np.ones(9))), 1.0)
    X = np.asarray(jax.random.normal(getkey(), (5, 40)))
    gram = X @ X.T
    off = max(abs(gram[i, k]) for i in range(5) for k in range(5) if i != k)
    np.testing.assert_allclose(near_orthogonality(X), 5 * off / np.diag(gram).min(), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("n, d", [(4, 30), (12, 5)])
def test_reduced_flow_matches_full_parameter_warped_integrate(getkey, n, d):
    """The classification flow (span coordinates C when n ≤ d, W itself when n > d) against
    `ibflow.integrate` on all parameters with `WarpedFlow(GradientFlow(), 1/L)`, same clock τ."""
    data = gaussian_mixture(getkey(), n=n, d=d, sigma_p=0.3)
    model = ibflow.TwoLayerClassifier.init(dim=d, width=6, init_std=0.3, slope=0.5,
                                           train_second=True, bias=True, key=getkey())
    tau = jnp.linspace(0.0, 1.5, 7)  # warped clock τ, dt/dτ = 1/L; both solves stop at τ = 1.5
    warp = ibflow.WarpedFlow(ibflow.GradientFlow(), lambda m, L: 1.0 / L)
    mine = ibflow.classification_flow(model, data.X, data.y, target_loss=1e-30, flow=warp,
                                      save_at=tau, clock_max=1.5, rtol=1e-11, atol=1e-13,
                                      throw=False)
    ref = ibflow.integrate(model, data.X, data.y, flow=warp, loss=ibflow.LogisticLoss(),
                           target_loss=1e-30, t_max=1.5, save_at=tau, rtol=1e-11, atol=1e-13,
                           stiff_solver=None, throw=False,
                           formulation=ibflow.ParameterSpace())
    assert float(mine.clock) == float(ref.clock) == 1.5
    np.testing.assert_allclose(mine.trajectory.time, ref.trajectory.time, rtol=1e-7)
    assert float(ref.loss) < 0.7 * np.log(2)  # well away from the start (log 2)
    np.testing.assert_allclose(mine.trajectory.loss, ref.trajectory.loss, rtol=1e-7)
    for f in (lambda m: m.first, lambda m: m.second, lambda m: m.bias):
        np.testing.assert_allclose(f(mine.model), f(ref.model), rtol=1e-6, atol=1e-8)
    # GF conserves aⱼ² − ‖wⱼ‖² − bⱼ² (docs/theory §2.7).
    np.testing.assert_allclose(mine.model.invariants()["balance"], model.invariants()["balance"],
                               atol=1e-8)


def test_log_loss_clock_is_the_loss_clock_flow_through_integrate(getkey):
    """Issue 11: the classification flow's log-loss clock (span coordinates) and
    `integrate(..., flow=LossClock(GradientFlow()))` on all parameters trace the same path: same
    clock, same loss levels, same models, same real time."""
    data = gaussian_mixture(getkey(), n=5, d=20, sigma_p=0.3)
    model = ibflow.TwoLayerClassifier.init(dim=20, width=6, init_std=0.3, slope=0.3, bias=True,
                                           key=getkey())
    clock = ibflow.LossClock(ibflow.GradientFlow())
    cs = jnp.linspace(0.0, 3.0, 7)
    # Target before any pre-activation reaches a kink from both sides (a sliding mode).
    mine = ibflow.classification_flow(model, data.X, data.y, target_loss=3e-2, save_at=cs,
                                      rtol=1e-11, atol=1e-13)
    ref = ibflow.integrate(model, data.X, data.y, flow=clock, loss=ibflow.LogisticLoss(),
                           target_loss=3e-2, save_at=cs, rtol=1e-11, atol=1e-13,
                           stiff_solver=None, formulation=ibflow.ParameterSpace())
    assert bool(mine.converged) and bool(ref.converged)
    # The clock is log(L0/L): independent check from the saved losses.
    np.testing.assert_allclose(mine.trajectory.ts, jnp.log(mine.trajectory.loss[0]
                                                           / mine.trajectory.loss), atol=1e-7)
    np.testing.assert_allclose(mine.trajectory.loss, ref.trajectory.loss, rtol=1e-8)
    np.testing.assert_allclose(mine.trajectory.time, ref.trajectory.time, rtol=1e-7)
    np.testing.assert_allclose(mine.trajectory.models.first, ref.trajectory.models.first,
                               rtol=1e-7, atol=1e-9)


def test_flow_matches_small_step_gradient_descent(mixture):
    """Flow in real time vs GD at t = kη: the difference is first order in η (halves with η), and
    below 1% (loss, relative) and 0.05 (stable rank, absolute) at η = 1e-3 over t ∈ [0, 2]."""
    X, y = mixture.X, mixture.y
    model = ibflow.TwoLayerClassifier.init(dim=784, width=40, init_std=1e-3, slope=0.1,
                                           key=jax.random.key(1))
    ts = jnp.linspace(0.0, 2.0, 21)
    flow = ibflow.classification_flow(model, X, y, flow=ibflow.GradientFlow(), save_at=ts,
                                      clock_max=2.0, target_loss=1e-12, throw=False, rtol=1e-7,
                                      atol=1e-9)
    assert bool(jnp.all(flow.trajectory.valid))
    np.testing.assert_allclose(flow.trajectory.time, ts, rtol=1e-10, atol=1e-12)
    f_rank = ibflow.trajectory_diagnostics(flow.trajectory, X, y).stable_rank
    errors = []
    for eta, every in [(2e-3, 50), (1e-3, 100)]:
        gd = ibflow.gradient_descent(model, X, y, learning_rate=eta, num_steps=20 * every,
                                     save_every=every)
        np.testing.assert_allclose(gd.trajectory.time, ts, atol=1e-12)
        g_rank = ibflow.trajectory_diagnostics(gd.trajectory, X, y).stable_rank
        errors.append((float(jnp.max(jnp.abs(gd.trajectory.loss / flow.trajectory.loss - 1))),
                       float(jnp.max(jnp.abs(g_rank - f_rank)))))
    (loss2, rank2), (loss1, rank1) = errors
    assert loss1 < 1e-2 and rank1 < 5e-2
    assert 1.6 < loss2 / loss1 < 2.5 and 1.6 < rank2 / rank1 < 2.5
    assert float(flow.trajectory.loss[-1]) < 0.05  # the comparison covers real progress


def test_leaky_relu_low_rank_and_equal_margins(leaky_run, mixture):
    """docs/theory §4.1 (Frei et al., Kou et al.): at loss 1e-6 the stable rank is ≤ 2 and the
    normalized margins of all points nearly agree."""
    sols = leaky_run
    assert bool(jnp.all(sols.converged))
    np.testing.assert_array_less(sols.loss, 1e-6 * (1 + 1e-9))
    final = eqx.filter_vmap(ibflow.classifier_diagnostics, in_axes=(0, None, None))(
        sols.model, mixture.X, mixture.y)
    np.testing.assert_array_less(final.stable_rank, 2.0)
    np.testing.assert_array_less(final.margin_spread, 0.1)
    assert bool(jnp.all(final.min_margin > 0))
    # Recorded trajectories: loss levels follow the log-loss clock c = log L(0) − log L.
    traj = sols.trajectory
    ok = traj.valid
    # c is the integration variable, so it matches log(L0/L(θ(c))) up to the solver's global error.
    expected = jnp.log(traj.loss[:, :1] / traj.loss)
    np.testing.assert_allclose(jnp.where(ok, traj.ts, 0), jnp.where(ok, expected, 0),
                               rtol=1e-2, atol=1e-6)
    # Real time is increasing along each path.
    assert bool(jnp.all(jnp.diff(jnp.where(ok, traj.time, jnp.inf), axis=1)[:, :-1] > 0))


def test_relu_flow_slides_and_small_step_gd_converges_to_it(mixture):
    """A ReLU classifier through its kinks (the default): pairs with ``aⱼyᵢ < 0`` reach z = 0
    and slide there (docs/theory §8.2), where GD zigzags across the kink. GD at t = kη (optax, an
    independent algorithm on the parameters, not the span coordinates) converges to the flow's
    W(t) at first order: the error halves with η. (Richardson extrapolation does not help
    here: the zigzag makes GD's error non-smooth in η; measured 7.6e-4 from η = 2e-3, 1e-3
    against GD's own 5.7e-4 at 1e-3.)"""
    X, y = mixture.X, mixture.y
    model = ibflow.TwoLayerClassifier.init(dim=784, width=20, init_std=1e-2, slope=0.0,
                                           key=jax.random.key(3))
    flow = ibflow.classification_flow(model, X, y, flow=ibflow.GradientFlow(),
                                      save_at=jnp.array([0.0, 2.0]), clock_max=2.0,
                                      target_loss=1e-12, throw=False, rtol=1e-10, atol=1e-12)
    assert int(flow.kinks.slides) >= 10 and int(jnp.sum(flow.kinks.sliding)) >= 10
    W = flow.trajectory.models.first[-1]
    errors = []
    for eta in (2e-3, 1e-3, 5e-4):
        gd = ibflow.gradient_descent(model, X, y, learning_rate=eta, num_steps=round(2 / eta),
                                     save_every=round(2 / eta))
        errors.append(float(jnp.linalg.norm(gd.model.first - W) / jnp.linalg.norm(W)))
    assert all(1.7 < a / b < 2.3 for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 4e-4, errors


def test_kkt_residual_decreases_along_the_flow(leaky_run, mixture):
    sols = leaky_run
    member = jax.tree_util.tree_map(lambda v: v[0], sols.trajectory)
    res = ibflow.kkt_residuals(member, mixture.X, mixture.y)
    res = res[np.isfinite(res)]
    assert len(res) == 12 and res[0] > 0.99  # at init the direction is far from any KKT point
    # Decreasing from loss 0.2 to 1e-6. The flow runs through its kinks, so pairs that slide sit
    # at z = 0 exactly, where the residual takes φ'(0) anywhere in [γ, 1] (Clarke).
    late = res[1:]
    assert np.all(np.diff(late) < 0) and late[-1] < 0.2 * late[0], late
    # Independent check of the last value: the same cone from numpy formulas, solved by another
    # algorithm (scipy's trust-constr), and sandwiched between two nonnegative least squares:
    # φ'(0) = γ on every kink pair (a subset of the cone) and the kink pairs' upper bound
    # μ ≤ λ dropped (a superset).
    model = jax.tree_util.tree_map(lambda v: v[0], sols.model)
    W, a = np.asarray(model.first), np.asarray(model.second)
    X, y = np.asarray(mixture.X), np.asarray(mixture.y)
    norm = np.linalg.norm(W)
    pre = X @ W.T
    kink = np.abs(pre) <= 1e-9 * np.abs(pre).max()
    dphi = np.where(kink, 0.1, np.where(pre >= 0, 1.0, 0.1))
    A = np.stack([(y[i] * a * dphi[i])[:, None] * X[i][None, :] for i in range(len(y))])
    A = A.reshape(len(y), -1).T
    owner, neuron = np.nonzero(kink)
    B = np.zeros((W.size, len(owner)))
    for k, (i, j) in enumerate(zip(owner, neuron)):
        B[j * W.shape[1]:(j + 1) * W.shape[1], k] = 0.9 * y[i] * a[j] * X[i]
    theta = W.ravel() / norm
    kkt = ibflow.kkt_residual(model, mixture.X, mixture.y)
    assert kkt.kink_pairs == len(owner) > 0 and int(sols.kinks.slides[0]) > 0
    inner = scipy.optimize.nnls(A, theta)[1]
    outer = scipy.optimize.nnls(np.concatenate([A, B], axis=1), theta)[1]
    assert outer - 1e-12 <= kkt.stationarity <= inner + 1e-12 and outer < inner
    M = np.concatenate([A, B], axis=1)
    n, k = A.shape[1], B.shape[1]
    G = np.concatenate([np.eye(n + k), np.concatenate([np.eye(n)[owner], -np.eye(k)], axis=1)])
    ref = scipy.optimize.minimize(
        lambda x: 0.5 * np.sum((M @ x - theta) ** 2), np.zeros(n + k),
        jac=lambda x: M.T @ (M @ x - theta), hess=lambda x: M.T @ M, method="trust-constr",
        constraints=[scipy.optimize.LinearConstraint(G, 0.0, np.inf)],
        options={"gtol": 1e-14, "xtol": 1e-14, "maxiter": 5000})
    np.testing.assert_allclose(kkt.stationarity, np.linalg.norm(M @ ref.x - theta), rtol=1e-5)
    assert kkt.min_margin > 0 and kkt.complementarity >= 0
    assert kkt.stationarity < late[0]


def test_relu_stable_rank_bounded(mixture):
    model = ibflow.TwoLayerClassifier.init(dim=784, width=40, init_std=1e-4, slope=0.0,
                                           key=jax.random.key(2))
    sol = ibflow.classification_flow(model, mixture.X, mixture.y, target_loss=1e-4, num_save=4)
    d = ibflow.classifier_diagnostics(sol.model, mixture.X, mixture.y)
    assert float(d.stable_rank) < 4.0
    assert float(d.min_margin) > 0


@pytest.mark.slow
def test_digits_relu_flow_keeps_every_pair_on_its_side_and_the_clock_exact():
    """scikit-learn's digits (n = 50, d = 64, width 50, ReLU, σ = 5e-5) to loss 1e-3: ~2 000
    switches, many of them clusters of pairs taken across together. Two independent checks of
    the mode the flow ends in and of the path: every free pair's pre-activation (numpy, from
    the returned W) lies on the side its pattern says and every sliding one on its kink, and
    the log-loss clock equals ``log(L(0)/L)`` (its definition: ``dc/dt = ‖∇L‖²/L`` along the
    exact flow), with L from numpy. Before: a located pair whose one-sided fields both point
    into its kink was sent back to its side by a pair taken along in its neuron's system, and
    pairs left on their wrong side had their event thresholds doubled at every transition:
    4 free pairs ended up to z = 35 on the wrong side, and the clock ran 0.67 ahead (the
    field used their pattern's slopes, not the loss's)."""
    data = ibflow.data.digits(task="parity", n=50)
    X, y = np.asarray(data.X), np.asarray(data.y)
    model = ibflow.TwoLayerClassifier.init(dim=64, width=50, init_std=5e-5, slope=0.0,
                                           key=jax.random.key(0))
    # Runtime-heavy (~1 200 segments): its own program at XLA's default optimization level
    # (the suite compiles at -O0, conftest.py): 25 s against 43 s at -O0, measured alone.
    solve = jax.jit(lambda m: ibflow.classification_flow(m, data.X, data.y, target_loss=1e-3,
                                                         num_save=4, throw=False),
                    compiler_options={"xla_backend_optimization_level": 2})
    sol = solve(model)
    assert sol.status == ibflow.Status.converged
    assert int(sol.kinks.switches) > 1000
    z = X @ np.asarray(sol.model.first).T
    pattern, sliding = np.asarray(sol.kinks.pattern), np.asarray(sol.kinks.sliding)
    wrong = ~sliding & np.where(pattern, z < -1e-8, z > 1e-8)
    assert not wrong.any(), z[wrong]
    assert sliding.any() and np.max(np.abs(z[sliding])) <= 1e-8

    def loss(W):
        margins = y * (np.maximum(X @ W.T, 0.0) @ np.asarray(model.second))
        return np.mean(np.logaddexp(0.0, -margins))

    exact = np.log(loss(np.asarray(model.first)) / loss(np.asarray(sol.model.first)))
    assert abs(float(sol.clock) - exact) <= 1e-3 * exact, (float(sol.clock), exact)


def test_slope_one_classifier_crosses_without_sliding(getkey):
    """γ = 1 (a traced slope: the kink machinery cannot rule it out statically) has no kink: a
    pre-activation reaching 0 crosses, it never slides (before: every crossing ended the solve
    as `degenerate_sliding`, dividing by hi − lo = 0). Same path as the smooth field."""
    X = jax.random.normal(getkey(), (6, 5))
    y = jnp.where(X @ jnp.ones(5) >= 0, 1.0, -1.0)
    model = ibflow.TwoLayerClassifier.init(dim=5, width=4, init_std=0.5, slope=1.0, key=getkey())
    kinked, smooth = (ibflow.classification_flow(
        model, X, y, target_loss=1e-3, save_at=jnp.array([1.0, 3.0]), rtol=1e-10, atol=1e-12,
        kinks=k) for k in (True, False))
    assert int(kinked.kinks.switches) >= 1 and int(kinked.kinks.slides) == 0
    np.testing.assert_allclose(kinked.trajectory.models.first, smooth.trajectory.models.first,
                               rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("bias, slope", [(False, 0.0), (True, 0.3)])
def test_equivalent_control_closed_form_matches_autodiff_and_holds_the_kink(getkey, bias, slope):
    """The classifier's closed-form multiplier matrices (``−aⱼ (G + β)[I, I] diag(r[I])``)
    against the generic autodiff linearization of the field, on each neuron's own sliding
    examples; and the slopes they give keep ``ż = 0`` on every sliding pair, with the system
    size chosen by the largest sliding set (4 rows) or padded to the full bound (20)."""
    from ibflow._kinks.equivalent_control import equivalent_control
    from ibflow._kinks.kinked import AbstractKinkedDynamics

    X = jax.random.normal(getkey(), (20, 24)) / np.sqrt(24)
    y = jnp.where(jnp.arange(20) % 2 == 0, 1.0, -1.0)
    model = ibflow.TwoLayerClassifier.init(dim=24, width=6, init_std=0.3, slope=slope,
                                           bias=bias, key=getkey())
    dyn = ibflow.Reduction().dynamics(model, X, y, ibflow.LossClock(ibflow.GradientFlow()),
                                      ibflow.LogisticLoss())
    state = dyn.initial_state()
    state["c"] = 0.05 * jax.random.normal(getkey(), state["c"].shape)
    # Neuron j ≥ 1 slides on examples j, j + 3, j + 6 (3 rows: the 4-row system of the 20
    # allowed); neuron 0 not.
    examples, neurons = np.arange(20)[:, None], np.arange(6)[None, :]
    offset = examples - neurons
    sliding = jnp.asarray((neurons >= 1) & (offset % 3 == 0) & (offset >= 0) & (offset < 7))
    positive = jax.random.bernoulli(getkey(), 0.5, (20, 6))
    base = jnp.where(sliding, 0.5 * (slope + 1.0), jnp.where(positive, 1.0, slope))
    index = jnp.argsort(~sliding, axis=0, stable=True)[:5].T
    mask = jnp.arange(5)[None, :] < jnp.sum(sliding, axis=0)[:, None]
    zdot, matrix = dyn.slope_response(state, base, index, mask,
                                      dyn.slope_linearization(state, base))
    zdot_ad, matrix_ad = AbstractKinkedDynamics.slope_response(
        dyn, state, base, index, mask,
        AbstractKinkedDynamics.slope_linearization(dyn, state, base))
    pairs = mask[:, :, None] & mask[:, None, :]  # autodiff builds columns of sliding pairs only
    np.testing.assert_allclose(zdot, zdot_ad, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jnp.where(pairs, matrix, 0.0), jnp.where(pairs, matrix_ad, 0.0),
                               rtol=1e-12, atol=1e-14)
    slopes, ok, _ = dyn.slopes(state, positive, sliding)
    padded, ok_padded, _ = equivalent_control(
        lambda i, m: dyn.slope_response(state, base, i, m,
                                        dyn.slope_linearization(state, base)),
        base, sliding, 20)
    assert bool(ok) and bool(ok_padded)
    np.testing.assert_array_equal(jnp.sum(sliding, axis=0), [0, 3, 3, 3, 3, 3])
    residual = dyn._zdot(state, slopes)
    assert float(jnp.max(jnp.abs(jnp.where(sliding, residual, 0.0)))) <= 1e-12 * float(
        jnp.max(jnp.abs(residual)))
    np.testing.assert_allclose(slopes, padded, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(jnp.where(sliding, 0.0, slopes), jnp.where(sliding, 0.0, base))
