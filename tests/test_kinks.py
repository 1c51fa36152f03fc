"""Exact flows through activation kinks (docs/theory §8.2, issue 13): event-located switches and
Filippov sliding, checked against Theorem 4's independent dual/KKT minimizer (docs/theory §2.5)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow


def _relative(a, b):
    return np.asarray(jnp.linalg.norm(a - b, axis=-1) / jnp.linalg.norm(b, axis=-1))


_one = eqx.filter_jit(lambda m, X, y: ibflow.integrate(m, X, y, throw=False))


def _kinked(models, X, y):
    """Each problem in turn through one compiled single-problem solve, results stacked. (Under
    ``vmap`` the segment loop runs in lockstep: every member waits for the slowest segment,
    measured 4.1 s against 1.0 s of run time for 20 Theorem-4 problems; the sweep vmaps.)"""
    outs = [_one(jax.tree_util.tree_map(lambda a, i=i: a[i], models), X[i], y[i])
            for i in range(X.shape[0])]
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *outs)


def _theorem4_reference(models, sol, X, y):
    Q = eqx.filter_vmap(lambda m, s: ibflow.implicit_bias(m, final_sign=s))(
        models, jnp.sign(sol.model.a))
    return eqx.filter_vmap(lambda Q, X, y: ibflow.minimize_regularizer(Q, X, y, throw=False))(
        Q, X, y)


def _random_leaky(key, gamma, alpha, s, n, d):
    """A realizable problem with mixed-sign targets: ``yᵢ = σ_a(⟨w̃*, xᵢ⟩)`` for the
    sign of ``a₀``, with ``w̃*`` random (so both signs of ``⟨w̃*, xᵢ⟩`` occur)."""
    kx, km, kt = jax.random.split(key, 3)
    X = jax.random.normal(kx, (n, d))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(alpha, s, dim=d, slope=gamma, key=km)
    sign = jnp.sign(m.a)
    z = X @ jax.random.normal(kt, (d,)) / jnp.sqrt(d)
    y = sign * jnp.where(sign * z >= 0, sign * z, gamma * sign * z)
    return m, X, y


def _same_sign_leaky(key, gamma, alpha, s, n, d):
    """A realizable problem with targets of the sign of ``a₀``: ``yᵢ = sign(a₀)·U(0.2, 2)``."""
    kx, km, kz = jax.random.split(key, 3)
    X = jax.random.normal(kx, (n, d))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(alpha, s, dim=d, slope=gamma, key=km)
    return m, X, jnp.sign(m.a) * jax.random.uniform(kz, (n,), minval=0.2, maxval=2.0)


def _gd_dagger(key, alpha, s):
    """docs/theory §7's "GD†" settings: γ = 0.2, n = 5, d = 12, 2-sparse w*, y = σ(Xw*)."""
    kx, km, kw = jax.random.split(key, 3)
    X = jax.random.normal(kx, (5, 12))
    w_star = jnp.zeros(12).at[:2].set(jax.random.normal(kw, (2,)))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(alpha, s, dim=12, slope=0.2, key=km)
    z = X @ w_star
    return m, X, jnp.where(z >= 0, z, 0.2 * z)


def test_theorem4_through_kinks(getkey):
    """24 random realizable problems with mixed-sign targets (γ ∈ {0.1, 0.2, 0.3, 0.5}, scales
    1e-3…10, shapes across (−0.9, 0.9), both signs of a₀, n = 6, d = 20), 8 with same-sign
    targets, and docs/theory §7's three GD† settings: every run converges to the default target and
    lands within 1e-10 of argmin Q on the affine set."""
    k = 24
    gammas = jnp.repeat(jnp.array([0.1, 0.2, 0.3, 0.5]), k // 4)
    alphas = jnp.tile(jnp.logspace(-3, 1, k // 4), 4)
    shapes = jax.random.uniform(getkey(), (k,), minval=-0.9, maxval=0.9)
    models, X, y = eqx.filter_vmap(lambda key, g, a, s: _random_leaky(key, g, a, s, 6, 20))(
        jax.random.split(getkey(), k), gammas, alphas, shapes)
    sol = _kinked(models, X, y)
    report = sol.kinks
    res = _theorem4_reference(models, sol, X, y)
    assert np.all(np.asarray(res.converged))
    converged = np.asarray(sol.converged)
    err = _relative(sol.predictor, res.w)
    assert np.mean(converged) >= 0.95, np.asarray(sol.status._value)
    assert np.max(err[converged]) < 1e-10, err
    # Both signs of a₀ and sliding runs are among them (else this would not test the issue).
    assert np.any(models.a > 0) and np.any(models.a < 0)
    assert np.sum(np.asarray(report.slides) > 0) >= 3, report.slides
    # Converged: the loss reached the target (to the roundoff of the located event).
    assert np.all(np.asarray(sol.loss)[converged]
                  <= (1 + 1e-3) * np.asarray(sol.target_loss)[converged])

    # The affine set differs from Xw = y (σ⁻¹ changes the constraint by 1/γ on negative
    # pre-activations), else this would test Theorem 1's constraint only.
    Q = eqx.filter_vmap(lambda m, s: ibflow.implicit_bias(m, final_sign=s))(
        models, jnp.sign(sol.model.a))
    shift = eqx.filter_vmap(lambda Q, y: Q.interpolation_targets(y))(Q, y) - y
    assert np.max(np.abs(np.asarray(shift))) > 0.1

    # Same-sign targets (sign(a₀)·U(0.2, 2), shapes in [0, 0.95]: a keeps its sign and no
    # pair slides): σ⁻¹ is the identity on the targets.
    k = 8
    models, X, y = eqx.filter_vmap(
        lambda key, g, a, s: _same_sign_leaky(key, g, a, s, 6, 20))(
        jax.random.split(getkey(), k), jnp.tile(jnp.array([0.2, 0.5]), k // 2),
        jnp.logspace(-3, 1, k), jnp.linspace(0.0, 0.95, k))
    sol = _kinked(models, X, y)
    res = _theorem4_reference(models, sol, X, y)
    assert np.all(np.asarray(sol.converged)), np.asarray(sol.status._value)
    assert np.all(np.asarray(res.converged))
    assert np.max(_relative(sol.predictor, res.w)) < 1e-10, _relative(sol.predictor, res.w)

    cases = jnp.array([[1e-3, -0.5], [1.0, 0.5], [10.0, 0.95]])
    models, X, y = eqx.filter_vmap(lambda key, c: _gd_dagger(key, c[0], c[1]))(
        jax.random.split(getkey(), 3), cases)
    sol = _kinked(models, X, y)
    res = _theorem4_reference(models, sol, X, y)
    assert np.all(np.asarray(sol.converged)), np.asarray(sol.status._value)
    assert np.max(_relative(sol.predictor, res.w)) < 1e-10, _relative(sol.predictor, res.w)


def _sliding_problem():
    """γ = 0.3, n = 8, d = 30, α = 1, s = 0 (docs/theory §8.2's setting); this seed slides."""
    kx, km, kz = jax.random.split(jax.random.key(2), 3)
    X = jax.random.normal(kx, (8, 30))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, 0.0, dim=30, slope=0.3, key=km)
    z = jax.random.normal(kz, (8,))
    return m, X, jnp.where(z >= 0, z, 0.3 * z)


def test_warped_and_mirror_flows_slide_to_the_same_limit():
    """A positive scalar warp (g = |a|, docs/theory §2.4) and the mirror flow of the quadratic
    potential with η = 2 run the gradient flow's path at other speeds: same slides, same limit
    (argmin Q, the independent reference). A switch budget of 2 on the same problem ends
    `unresolved_switching` after exactly 2 switches, and a target above the tail's switch level
    ends on the path at that target (budget and target are traced: same program).
    (The gradient flow itself slides to argmin Q in `test_theorem4_through_kinks`; each flow
    here compiles its own program, the suite's main cost.)"""
    m, X, y = _sliding_problem()
    warped = ibflow.WarpedFlow(ibflow.GradientFlow(), lambda m, L: jnp.abs(m.a))
    flows = [warped, ibflow.MirrorFlow(ibflow.QuadraticPotential(0.5), learning_rate=2.0)]
    ref = None
    for flow in flows:
        sol = ibflow.integrate(m, X, y, flow=flow, throw=False)
        report = sol.kinks
        assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
        assert int(report.slides) >= 1
        if ref is None:
            Q = ibflow.implicit_bias(m, final_sign=jnp.sign(sol.model.a))
            ref = ibflow.minimize_regularizer(Q, X, y).w
            assert int(report.switches) > 2
        assert _relative(sol.predictor, ref) < 1e-10

    sol = ibflow.integrate(m, X, y, flow=warped, max_switches=2, throw=False)
    assert sol.status == ibflow.Status.unresolved_switching
    assert int(sol.kinks.switches) == 2

    # A target above the tail's switch level (1e-8·L₀) is the explicit phase's own stop: the
    # solve ends on the path at that loss (the event aims at half the target), not at the
    # limit (loss ~1e-30). The tail once ran on from there to the clock's horizon (1e14).
    target = 1e-4 * 0.5 * float(jnp.mean(y**2))
    sol = ibflow.integrate(m, X, y, flow=warped, target_loss=target, throw=False)
    assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    assert 0.4 * target <= float(sol.loss) <= target
    assert float(sol.clock) < 1e3 and float(sol.time) < 1e3

    # A target above the initial loss is met at once, by the initialization (the segment loop's
    # loss event is a down-crossing, so none occurred, and the solve ran on to its step budget:
    # 1 658 steps to a loss of 1e-13).
    initial = 0.5 * float(jnp.mean((jax.vmap(m)(X) - y) ** 2))
    sol = ibflow.integrate(m, X, y, flow=warped, target_loss=2 * initial, throw=False)
    assert sol.status == ibflow.Status.converged and int(sol.steps) == 0
    assert float(jnp.max(jnp.abs(sol.predictor - m.predictor()))) == 0.0


def test_bad_switch_budget_is_refused():
    m, X, y = _sliding_problem()
    with pytest.raises(ValueError, match="max_switches"):
        ibflow.integrate(m, X, y, max_switches=0)


def test_shallow_relu_net_slides_and_keeps_its_invariants():
    """`ShallowNet` (ReLU, width 16) on the four points of the mirror-relu reproduction, a(0) = 0:
    kinks reach data points and slide along them (docs/theory §8.2). Gradient flow conserves
    ``a_k² − w_k² − b_k²`` per neuron for any slope ``σ'(0) ∈ [0, 1]`` (docs/theory §2.7), so the
    invariants are an independent check of every crossing and slide (a pair integrated on the
    wrong side breaks them). Seed 1 is an ill-conditioned, slow flow (t ≈ 1.4e5), stiff from
    loss 1e-2·L₀ on, where the tail takes over far from the interpolation set: with the
    Gauss–Newton chord alone it ended ``budget_exhausted`` at loss 2e-6; the exact dense
    Jacobian of small models above the switch level (`PiecewiseLinearDynamics.linearization`)
    converges it."""
    from ibflow._reproduce.mirror import BIAS, X_DATA, Y_DATA

    X, y = jnp.asarray(X_DATA)[:, None], jnp.asarray(Y_DATA)
    slides = 0
    for seed in range(4):
        net = ibflow.ShallowNet.init(16, bias=BIAS, key=jax.random.key(seed))
        sol = _one(net, X, y)
        assert sol.status == ibflow.Status.converged, (seed, ibflow.Status[sol.status])
        before, after = net.invariants()["balance"], sol.model.invariants()["balance"]
        np.testing.assert_allclose(after, before, rtol=0, atol=1e-11)
        outputs = jax.vmap(sol.model)(X)
        np.testing.assert_allclose(outputs, y, rtol=0, atol=1e-10)
        slides += int(sol.kinks.slides)
    assert slides >= 3


def test_two_layer_abs_net_slides_to_interpolation_keeping_its_invariants():
    """`TwoLayerNet` with |·| (slopes [−1, 1]) and biases, d = 5, m = 8, n = 6 random targets:
    every flow slides and interpolates, and gradient flow conserves ``a_j² − ‖w_j‖² − b_j²``
    per neuron through every crossing and slide (docs/theory §2.7, the independent check). (The ReLU
    version runs in tests/test_teacher_student.py; with random targets some ReLU flows end on
    a plateau of dead neurons, loss 1e-2 to 0.3, as ``budget_exhausted``.)"""
    slides = 0
    for seed in range(4):
        k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
        net = ibflow.TwoLayerNet.from_scale_shape(1.0, 0.0, dim=5, width=8,
                                                  activation=ibflow.Absolute(), bias=True, key=k1)
        X, y = jax.random.normal(k2, (6, 5)), jax.random.normal(k3, (6,))
        sol = _one(net, X, y)
        assert sol.status == ibflow.Status.converged, (seed, ibflow.Status[sol.status])
        np.testing.assert_allclose(sol.model.invariants()["balance"],
                                   net.invariants()["balance"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(jax.vmap(sol.model)(X), y, rtol=0, atol=1e-10)
        slides += int(sol.kinks.slides)
    assert slides >= 4


def _first_crossing(components, lower, upper, solver=None):
    """`optx.root_find` with `FirstCrossing` (or `solver`) on ``min_k components(t)_k``."""
    import optimistix as optx

    from ibflow._kinks.root_finder import FirstCrossing

    def fn(t, _):
        values = components(t)
        return jnp.min(values), values

    solver = FirstCrossing(rtol=1e-14, atol=1e-12) if solver is None else solver
    return optx.root_find(fn, solver, y0=jnp.asarray(upper), has_aux=True, throw=False,
                          options=dict(lower=lower, upper=upper), max_steps=1000)


def test_event_root_finder_skips_the_switched_pair_and_a_plateau():
    """The event is the minimum of many components. At a segment's start the pair that just
    switched is ~0⁺ and growing, and a sliding pair whose multiplier rests on its bound sits
    on a plateau at its offset: a scalar root finder on the minimum took 42 evaluations per
    root on the stable-rank run (more than bisection). `FirstCrossing` takes a secant root per
    component that crosses within the bracket, so neither takes part: scipy's root of the
    first crossing component (Brent, an independent algorithm) to 1e-12, in a third of
    bisection's evaluations on the minimum."""
    import optimistix as optx
    import scipy.optimize

    def components(t):
        return jnp.stack([1e-3 * t + 1e-17,            # the pair that just switched
                          jnp.full_like(t, 1e-16),      # a plateau at an offset
                          1e-4 * (jnp.exp(-2 * t) - 0.3),  # the first crossing
                          1e-2 * (1.5 - t)])            # a later crossing

    reference = scipy.optimize.brentq(lambda t: np.exp(-2 * t) - 0.3, 0.0, 2.0, xtol=1e-15)
    ours = _first_crossing(components, 0.0, 2.0)
    bisection = _first_crossing(components, 0.0, 2.0,
                                optx.Bisection(rtol=1e-14, atol=1e-12, flip=True))
    assert ours.result == optx.RESULTS.successful
    assert abs(float(ours.value) - reference) <= 1e-12
    assert int(ours.stats["num_steps"]) <= int(bisection.stats["num_steps"]) / 3


@pytest.mark.parametrize("name", ["smooth", "min-of-two", "linear", "scales-apart"])
def test_event_root_finder_matches_brentq_in_fewer_steps_than_bisection(name):
    """The segment loop's event locator (`FirstCrossing`) against scipy's Brent method on the
    first component to cross: the same root to 1e-12 on a smooth, a kinked minimum of two, a
    linear function, and a minimum whose first crossing is a component 10⁷ times flatter than
    the one that crosses later, in fewer evaluations than
    ``optx.Bisection`` on the minimum; and a value held above ``atol`` collapses the bracket
    to adjacent floats and stops at once with ``nonlinear_max_steps_reached``."""
    import optimistix as optx
    import scipy.optimize

    first, components, lower, upper = {
        "smooth": (lambda t: np.exp(-3 * t) - 0.2,
                   lambda t: 1e-4 * jnp.stack([jnp.exp(-3 * t) - 0.2]), 0.0, 2.0),
        "min-of-two": (lambda t: 0.7 - t**2,
                       lambda t: 1e-4 * jnp.stack([jnp.log(2 / (1 + t)), 0.7 - t**2]),
                       0.0, 3.0),
        "linear": (lambda t: 1.5 - t, lambda t: 1e-4 * jnp.stack([1.5 - t]), 0.0, 1.5),
        "scales-apart": (lambda t: 0.5 - np.sin(t),
                         lambda t: jnp.stack([10.0 * (1.2 - t), 1e-6 * (0.5 - jnp.sin(t))]),
                         0.0, 2.0),
    }[name]
    reference = scipy.optimize.brentq(first, lower, upper, xtol=1e-15)
    ours = _first_crossing(components, lower, upper)
    bisection = _first_crossing(components, lower, upper,
                                optx.Bisection(rtol=1e-14, atol=1e-12, flip=True))
    assert ours.result == optx.RESULTS.successful
    assert abs(float(ours.value) - reference) <= 1e-12
    assert int(ours.stats["num_steps"]) <= 14
    if name != "linear":  # bisection's first midpoint is the linear case's root
        assert int(ours.stats["num_steps"]) < int(bisection.stats["num_steps"]) / 2
    if name == "smooth":  # a value held above atol: the bracket collapses, and it says so
        held = _first_crossing(lambda t: components(t) + 1e-9 * jnp.sign(components(t)),
                               lower, upper)
        assert held.result == optx.RESULTS.nonlinear_max_steps_reached
        assert int(held.stats["num_steps"]) < 100
        assert abs(float(held.value) - reference) <= 1e-12


def test_vmapped_members_in_different_legs_end_as_they_do_alone():
    """Under ``vmap`` each segment runs one leg for the whole batch (`ibflow._segments._batch_leg`):
    members that reach the hand-over to the implicit tail early wait in it while the others
    finish the explicit leg. Problems at scales 0.1, 1 and 3 hand over at different segments;
    each member must end where its own solve ends, at Theorem 4's limit."""
    keys = jax.random.split(jax.random.key(7), 3)
    scales = jnp.array([0.1, 1.0, 3.0])
    models, X, y = eqx.filter_vmap(lambda key, a: _random_leaky(key, 0.3, a, 0.0, 6, 10))(
        keys, scales)
    batch = eqx.filter_vmap(lambda m, X, y: ibflow.integrate(m, X, y, throw=False))(
        models, X, y)
    alone = _kinked(models, X, y)
    np.testing.assert_array_equal(np.asarray(batch.status._value),
                                  np.asarray(alone.status._value))
    assert bool(jnp.all(alone.converged))
    assert np.all(_relative(batch.predictor, alone.predictor) <= 1e-10)
    assert np.all(np.asarray(alone.kinks.switches) > 0)
    # And both at Theorem 4's limit (the independent dual/KKT minimizer).
    res = _theorem4_reference(models, batch, X, y)
    assert np.all(np.asarray(res.converged))
    assert np.max(_relative(batch.predictor, res.w)) < 1e-10, _relative(batch.predictor, res.w)
