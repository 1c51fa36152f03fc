"""A depth-3 ReLU `ibflow.MLP` through its kinks (issue "Limits of any kind", item 4): the
coupled multiplier system of a deep network (a slope of layer 1 changes what layer 2 sees, so
the sliding pairs of all layers enter one system, multi-affine in the slopes) against a root
solve of the hand-written field (numpy backpropagation, scipy's ``fsolve``), the field and
its derivative against it, a batched solve against the loop; an interpolating
limit reached through crossings and slides against gradient descent as its step halves; a
flow that stops at a spurious stationary point against GD's limit loss."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from jax.flatten_util import ravel_pytree

import ibflow
from ibflow._kinks.mode import Mode


def _problem(seed, n=6):
    """Depth 3 (widths 4, 4, biases), d = 3, n random inputs and targets. Seed 13 interpolates
    through 9 switches (2 slides, 1 exit); seed 2 stops at a spurious stationary point
    (loss 0.30) with a pair sliding."""
    X = jax.random.normal(jax.random.key(100 + seed), (n, 3))
    y = jax.random.normal(jax.random.key(200 + seed), (n,))
    model = ibflow.MLP.from_scale_shape(1.0, 0.2, dim=3, widths=(4, 4),
                                        activation=ibflow.ReLU(), bias=True,
                                        key=jax.random.key(seed))
    return model, X, y


def _flat(model):
    return np.asarray(ravel_pytree(eqx.filter(model, eqx.is_inexact_array))[0])


def _numpy_flow(W, b, X, y, slopes):
    """The gradient-flow direction −∇L (L = ½ mean(r²)) with ``σ(z) = slope·z`` at every hidden
    pair (n, 8), by hand-written backpropagation: ``(Ẇ, ḃ)`` per layer, and ``ż`` of every
    pair, ``ż₂ = Ẇ₂h₁ + W₂(s₁ ⊙ ż₁) + ḃ₂`` (at a sliding pair of layer 1, ż₁ = 0 at a solution,
    so its slope there does not matter)."""
    n = X.shape[0]
    s1, s2 = slopes[:, :4], slopes[:, 4:]
    z1 = X @ W[0].T + b[0]
    h1 = s1 * z1
    z2 = h1 @ W[1].T + b[1]
    h2 = s2 * z2
    r = h2 @ W[2][0] + b[2][0] - y
    d2 = r[:, None] * W[2][0][None, :] * s2  # ∂(nL)/∂z₂
    d1 = (d2 @ W[1]) * s1  # ∂(nL)/∂z₁
    dW = [-d1.T @ X / n, -d2.T @ h1 / n, -(r @ h2)[None, :] / n]
    db = [-d1.sum(0) / n, -d2.sum(0) / n, -np.array([r.sum()]) / n]
    zdot1 = X @ dW[0].T + db[0]
    zdot2 = h1 @ dW[1].T + (s1 * zdot1) @ W[1].T + db[1]
    return dW, db, np.concatenate([zdot1, zdot2], axis=1)


def _numpy_multipliers(W, b, X, y, positive, sliding):
    """Every pair's slope: its side's (ReLU: 1 or 0), and on the sliding pairs the root of
    ``ż = 0`` by scipy's ``fsolve`` from the box's middle."""
    side = np.where(positive, 1.0, 0.0)

    def residual(lam):
        full = side.copy()
        full[sliding] = lam
        return _numpy_flow(W, b, X, y, full)[2][sliding]

    lam, _, flag, message = scipy.optimize.fsolve(residual, np.full(int(sliding.sum()), 0.5),
                                                  xtol=1e-14, full_output=True)
    # (3: "xtol too small", at round-off; the residual is the check)
    assert flag in (1, 3), message
    assert np.max(np.abs(residual(lam))) <= 1e-13
    side[sliding] = lam
    return side, residual


def _sliding_state():
    """Seed 0's problem with biases that put exactly three pairs at z = 0: example 0 on
    neuron 1 of layer 1 and neuron 2 of layer 2, example 3 on neuron 0 of layer 1. Returns
    the dynamics, its state, the sides and the sliding set (the three pairs)."""
    model, X, y = _problem(0)
    W = [np.asarray(w) for w in model.weights]
    Xn = np.asarray(X)
    b1 = np.array([-(W[0] @ Xn[3])[0], -(W[0] @ Xn[0])[1], 0.3, -0.2])
    h1 = np.maximum(Xn[0] @ W[0].T + b1, 0.0)
    b2 = np.array([0.1, -0.1, -(W[1] @ h1)[2], 0.2])
    model = eqx.tree_at(lambda m: m.biases, model,
                        tuple(jnp.asarray(v) for v in (b1, b2, np.array([0.05]))))
    dyn = ibflow.ParameterSpace().dynamics(model, X, y, ibflow.GradientFlow(),
                                           ibflow.SquareLoss())
    state = dyn.initial_state()
    z = np.asarray(dyn.preactivations(state))
    sliding = np.zeros(z.shape, bool)
    sliding[0, 1] = sliding[3, 0] = sliding[0, 6] = True
    assert np.all(np.abs(z[sliding]) <= 1e-15) and np.all(np.abs(z[~sliding]) > 1e-3)
    return dyn, state, z > 0, sliding


def test_coupled_multipliers_solve_the_hand_written_system():
    """Example 0 slides on neuron 1 of layer 1 *and* neuron 2 of layer 2 (its output weight's
    gradient is then a product of both slopes: the system is not affine), example 3 on neuron 0
    of layer 1. The biases put exactly these pairs at z = 0. ibflow's multipliers (Newton on the
    coupled system) must solve ż = 0 on them as scipy's ``fsolve`` does on the numpy field, and
    leave every other slope at its side's."""
    dyn, state, positive, sliding = _sliding_state()
    W = [np.asarray(w) for w in dyn.initial.weights]
    b = [np.asarray(v) for v in dyn.initial.biases]
    slopes, ok, stiffness = eqx.filter_jit(lambda d, s, p, q: d.slopes(s, p, q))(
        dyn, state, jnp.asarray(positive), jnp.asarray(sliding))
    assert bool(ok)
    expected, residual = _numpy_multipliers(W, b, np.asarray(dyn.X), np.asarray(dyn.y),
                                            positive, sliding)
    slopes = np.asarray(slopes)
    np.testing.assert_allclose(slopes[sliding], expected[sliding], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(slopes[~sliding], expected[~sliding])
    # The system is not affine here: the multipliers differ from one linear solve at the
    # box's middle (what a separable model's single step would give) by far more than 1e-10.
    jac = scipy.optimize.approx_fprime(np.full(3, 0.5), residual, 1e-7)
    one_step = 0.5 - np.linalg.solve(jac, residual(np.full(3, 0.5)))
    assert np.max(np.abs(one_step - expected[sliding])) > 1e-4
    assert np.all(np.asarray(stiffness)[~sliding] == 0)


@eqx.filter_jit
def _gd_steps(model, X, y, eta, steps):
    """`steps` full-batch GD steps of size `eta` on ``L = ½ mean(r²)`` (one compiled loop for
    every step size)."""
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(p, static))(X) - y) ** 2)

    end = jax.lax.fori_loop(0, steps, lambda _, p: jax.tree_util.tree_map(
        lambda a, g: a - eta * g, p, jax.grad(loss)(p)), params)
    return end, loss(end)


def _gd(model, X, y, eta, steps):
    end, loss = _gd_steps(model, X, y, jnp.asarray(eta), jnp.asarray(steps))
    return _flat(end), float(loss)


def _integrate(model, X, y):
    # Every solve here (and tests/test_mlp.py's ReLU MLP) has these shapes and options: one
    # compiled program, shared through the run's compilation cache.
    return ibflow.integrate(model, X, y, throw=False)


def test_depth3_relu_limit_is_gradient_descents_as_its_step_halves():
    """An interpolating flow through crossings and slides (pairs of both hidden layers switch;
    one still slides at the limit). GD's end point reaches the same loss floor and tends to the
    flow's limit at first order: its distance halves with the step (ratios 1.9–2.1 over four
    halvings, measured), down to 1.3e-4 of ‖θ‖'s scale at η = 1.25e-3. Kinks give GD's error
    an oscillating O(η) coefficient, so Richardson extrapolation does not cancel it cleanly;
    the halving is the check. A wrong multiplier or a missed switch moves the limit by far
    more than these distances."""
    model, X, y = _problem(13)
    sol = _integrate(model, X, y)
    assert sol.status == ibflow.Status.converged
    kinks = sol.kinks
    assert int(kinks.switches) >= 5 and int(kinks.slides) >= 1
    pattern = np.asarray(kinks.event_kind)
    assert set(pattern[pattern >= 0].tolist()) == {0, 1, 2}  # crossings, slides and exits
    limit = _flat(sol.model)
    distances = []
    for eta in (0.01, 0.005, 0.0025, 0.00125):
        theta, loss = _gd(model, X, y, eta, int(240 / eta))
        assert loss <= 1e-20, (eta, loss)
        distances.append(np.linalg.norm(theta - limit))
    ratios = np.array(distances[:-1]) / np.array(distances[1:])
    assert np.all((ratios > 1.8) & (ratios < 2.2)), (distances, ratios)
    assert distances[-1] <= 2e-4 * np.linalg.norm(limit), distances


def test_depth3_relu_spurious_stationary_point_is_gradient_descents():
    """The flow stops at a stationary point with loss 0.30, a pair sliding: ``stationary``, in
    a few hundred steps (the budget is 100 000). GD runs to the same point: its loss agrees to
    1e-8 relative, its parameters at first order in the step."""
    model, X, y = _problem(2)
    sol = _integrate(model, X, y)
    assert sol.status == ibflow.Status.stationary, ibflow.Status[sol.status]
    assert int(sol.steps) < 2000
    loss = float(sol.loss)
    assert loss > 0.1
    limit = _flat(sol.model)
    distances = []
    for eta in (0.01, 0.005):
        theta, loss_gd = _gd(model, X, y, eta, int(4000 / eta))
        assert abs(loss_gd - loss) <= 1e-8 * loss, (eta, loss_gd, loss)
        distances.append(np.linalg.norm(theta - limit))
    assert distances[1] < 0.6 * distances[0], distances


def test_coupled_flow_under_vmap_is_the_loop():
    """Two initializations (seed 13's and one 2 % larger) through their kinks in one batched
    solve: the members slide at different times, and the coupled system's size is chosen for
    the batch. Each member ends where its own solve does."""
    model, X, y = _problem(13)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def run(k):
        return _integrate(eqx.combine(jax.tree_util.tree_map(lambda a: k * a, params), static),
                          X, y)

    factors = jnp.array([1.0, 1.02])
    batched = eqx.filter_jit(eqx.filter_vmap(run))(factors)
    for i, k in enumerate(factors):
        sol = run(k)
        assert int(batched.status._value[i]) == int(sol.status._value)
        assert sol.status == ibflow.Status.converged
        assert int(batched.kinks.switches[i]) == int(sol.kinks.switches) >= 5
        one = _flat(sol.model)
        member = _flat(jax.tree_util.tree_map(
            lambda a, i=i: a[i], batched.model))
        assert np.linalg.norm(member - one) <= 1e-8 * np.linalg.norm(one)


def test_coupled_sliding_field_and_its_derivative_are_the_hand_written_ones():
    """The field in a mode where pairs of one example slide in both hidden layers, its
    multipliers from the coupled Newton solve (which depend on the state), against the numpy
    field with scipy's multipliers; and ``jax.grad`` of a projection of it against central
    differences of that numpy field along every direction tangent to the sliding manifold
    ``{z_S(θ) = 0}``, where the flow lives (off it, the mode's field is a smooth continuation
    that each implementation chooses: ibflow takes the residuals with the mode's slopes and a
    later layer's ż with autodiff's σ' of an earlier sliding pair, the numpy field its
    multiplier; both agree on the manifold, where that pair's ż is 0)."""
    dyn, state, positive, sliding = _sliding_state()
    mode = Mode(positive=jnp.asarray(positive), sliding=jnp.asarray(sliding),
                offset=jnp.zeros(positive.shape), live=jnp.array(True))
    weights = np.asarray(jax.random.normal(jax.random.key(5), state.shape))
    X, y = np.asarray(dyn.X), np.asarray(dyn.y)
    unravel = ravel_pytree(eqx.filter(dyn.initial, eqx.is_inexact_array))[1]

    def reference(flat):
        model = unravel(jnp.asarray(flat))
        W = [np.asarray(w) for w in model.weights]
        b = [np.asarray(v) for v in model.biases]
        slopes, _ = _numpy_multipliers(W, b, X, y, positive, sliding)
        dW, db, _ = _numpy_flow(W, b, X, y, slopes)
        return np.concatenate([a.ravel() for a in (*dW, *db)])

    @jax.jit
    def field(s):
        return dyn.vector_field(0.0, s, mode)

    theta = np.asarray(state)
    np.testing.assert_allclose(np.asarray(field(state)), reference(theta), rtol=1e-10,
                               atol=1e-13)
    grad = np.asarray(jax.grad(lambda s: jnp.dot(weights, field(s)))(state))
    normals = np.asarray(jax.jacobian(dyn.preactivations)(state))[sliding]  # (3, p)
    tangents = scipy.linalg.null_space(normals).T  # p − 3 orthonormal directions
    assert tangents.shape == (theta.size - 3, theta.size)
    h = 1e-6
    fd = np.array([weights @ (reference(theta + h * t) - reference(theta - h * t)) / (2 * h)
                   for t in tangents])
    np.testing.assert_allclose(tangents @ grad, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


@pytest.mark.parametrize("activation", [ibflow.Tanh(), ibflow.ReLU()])
def test_only_deep_piecewise_linear_mlps_couple_their_kinks(activation):
    """A depth-2 MLP is a two-layer network: its kinks split per neuron (and it has kinks only
    with a piecewise-linear activation); depth 3 couples them."""
    shallow = ibflow.MLP.from_scale_shape(1.0, dim=3, widths=(4,), activation=activation,
                                          key=jax.random.key(0))
    deep = ibflow.MLP.from_scale_shape(1.0, dim=3, widths=(4, 2), activation=activation,
                                       key=jax.random.key(0))
    kinked = isinstance(activation, ibflow.ReLU)
    assert shallow.has_kinks() == deep.has_kinks() == kinked
    assert shallow.separable_kinks() and not deep.separable_kinks()
    x = jnp.array([0.3, -1.0, 2.0])
    assert deep.preactivations(x).shape == (6,)
