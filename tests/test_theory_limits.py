"""Flow limits from ``ibflow.integrate`` against ``ibflow.minimize_regularizer(implicit_bias(...))``
(docs/theory §2.3–§2.5), and the regime limits of the regularizers with measured trends.

Theorems 1 and 2 are checked on 10 random problems (d = 50, n = 20 or 10, scales 1e-3…10, shapes
across (−1, 1)), vmapped into one `integrate` call and one `minimize_regularizer` call.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow

D = 50
TOL = 1e-8


def _relative(a, b):
    return np.asarray(jnp.linalg.norm(a - b, axis=-1) / jnp.linalg.norm(b, axis=-1))


@eqx.filter_jit
def _flows(models, X, y, formulation=ibflow.PreferReduction()):
    # A step budget well above what converging runs need (≤ ~1e4) keeps a stalled run short.
    return eqx.filter_vmap(lambda m, X, y: ibflow.integrate(
        m, X, y, throw=False, formulation=formulation, max_steps=30_000))(models, X, y)


def _minimize(Q, X, y):
    return eqx.filter_vmap(lambda Q, X, y: ibflow.minimize_regularizer(Q, X, y, throw=False)
                           )(Q, X, y)


def _sparse_problem(key, n, d=D):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    w_star = jnp.zeros(d).at[:5].set(jax.random.normal(kw, (5,)))
    return X, X @ w_star


# --- Theorem 1 and Appendix A -------------------------------------------------------------

def _diagonal_models(key):
    """10 unbiased (per-coordinate α around 1e-3…10, s ∈ (−0.95, 0.95)) and 10 biased inits."""
    keys = jax.random.split(key, 4)
    alphas = jnp.logspace(-3, 1, 10)
    a = alphas[:, None] * jnp.exp(jax.random.uniform(keys[0], (10, D), minval=-0.5, maxval=0.5))
    s = jax.random.uniform(keys[1], (10, D), minval=-0.95, maxval=0.95)
    unbiased = eqx.filter_vmap(lambda a, s: ibflow.DiagonalNet.from_scale_shape(a, s))(a, s)
    sig = jnp.sqrt(alphas)[:, None, None]
    u = sig * jax.random.normal(keys[2], (10, 4, D))
    biased = eqx.filter_vmap(lambda u: ibflow.DiagonalNet(u[0], u[1], u[2], u[3]))(u)
    return jax.tree_util.tree_map(lambda p, q: jnp.concatenate([p, q]), unbiased, biased)


def test_theorem1_flow_matches_minimizer(getkey):
    models = _diagonal_models(getkey())
    X, y = jax.vmap(lambda k: _sparse_problem(k, 20))(jax.random.split(getkey(), 20))
    sol = _flows(models, X, y)
    assert np.all(np.asarray(sol.converged))
    Q = eqx.filter_vmap(ibflow.implicit_bias)(models)
    res = _minimize(Q, X, y)
    assert np.all(np.asarray(res.converged))
    err = _relative(sol.predictor, res.w)
    assert np.max(err) < TOL, err
    # The biased members really are biased: dropping the w₀ term is far off (theory §2.3 table).
    unbiased_Q = eqx.filter_vmap(lambda k: ibflow.DiagonalNetRegularizer(k, jnp.zeros_like(k)))(Q.k)
    wrong = _relative(_minimize(unbiased_Q, X, y).w, res.w)[10:]
    assert np.min(wrong) > 1e-3, wrong


@pytest.mark.slow
def test_theorem1_parameter_flow_not_circular(getkey):
    """The default diagonal flow integrates the closed-form reduced ODE, which is built on the
    same sinh formula as the regularizer; the full 4d-parameter gradient flow is independent."""
    models = jax.tree_util.tree_map(lambda a: a[5:15], _diagonal_models(getkey()))
    X, y = jax.vmap(lambda k: _sparse_problem(k, 20))(jax.random.split(getkey(), 10))
    sol = _flows(models, X, y, formulation=ibflow.ParameterSpace())
    assert np.all(np.asarray(sol.converged))
    res = _minimize(eqx.filter_vmap(ibflow.implicit_bias)(models), X, y)
    err = _relative(sol.predictor, res.w)
    assert np.max(err) < TOL, err


# --- Theorem 2 / Proposition 1 with the flip rule --------------------------------------------

def _neuron_problems(key, shapes, flip):
    """Single-neuron inits with scales 1e-3…10 and given shapes; targets ``y = Xw*`` with
    ``w*`` against (flip) or along the initial ``w₀`` plus noise, so that for δ < 0 the second
    layer is driven through 0 (flip) or not."""
    kx, km, kn = jax.random.split(key, 3)
    alphas = jnp.logspace(-3, 1, 10)
    Xs = jax.random.normal(kx, (10, 10, D))

    def one(k, alpha, s, X, noise):
        m = ibflow.FullyConnectedNet.from_scale_shape(alpha, s, dim=D, key=k)
        w0 = m.first[0] / jnp.linalg.norm(m.first[0])
        direction = -w0 if flip else w0
        w_star = 2.0 * direction * jnp.sign(m.second[0]) + 0.3 * noise
        return m, X @ w_star

    noise = jax.random.normal(kn, (10, D)) / jnp.sqrt(D)
    models, y = eqx.filter_vmap(one)(jax.random.split(km, 10), alphas, shapes, Xs, noise)
    return models, Xs, y


def test_theorem2_flow_matches_minimizer_with_flip_rule(getkey):
    cases = {  # name: (shapes, drive against w₀)
        "delta>0": (jnp.linspace(0.1, 0.95, 10), True),
        "delta=0 (Prop. 1)": (jnp.zeros(10), False),
        "delta<0 no flip": (jnp.linspace(-0.95, -0.1, 10), False),
        "delta<0 flip": (jnp.linspace(-0.95, -0.5, 10), True),
    }
    parts = [_neuron_problems(getkey(), s, flip) for s, flip in cases.values()]
    models, X, y = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *parts)
    sol = _flows(models, X, y)
    assert np.all(np.asarray(sol.converged))
    a0, a_end = models.second[:, 0], sol.model.second[:, 0]
    flipped = np.asarray(jnp.sign(a0) != jnp.sign(a_end))
    delta = np.asarray(a0**2 - jnp.sum(models.first[:, 0] ** 2, axis=-1))
    assert not np.any(flipped[:30]), "only the last case was built to flip"
    assert np.sum(flipped[30:]) >= 8, flipped  # the flip case really flips
    assert np.all(delta[flipped] < 0)          # and only δ < 0 can flip (docs/theory §2.4)
    Q = eqx.filter_vmap(lambda m, s: ibflow.implicit_bias(m, final_sign=s))(models, jnp.sign(a_end))
    res = _minimize(Q, X, y)
    assert np.all(np.asarray(res.converged))
    err = _relative(sol.predictor, res.w)
    for i, name in enumerate(cases):
        assert np.max(err[10 * i:10 * i + 10]) < TOL, (name, err[10 * i:10 * i + 10])
    # Without the flip rule the flipped runs are far from the unflipped regularizer's minimizer.
    Q_unflipped = eqx.filter_vmap(lambda m, s: ibflow.implicit_bias(m, final_sign=s))(
        models, jnp.sign(a0))
    wrong = _relative(_minimize(Q_unflipped, X, y).w, sol.predictor)
    assert np.min(wrong[flipped]) > 0.1, wrong[flipped]


# Theorem 4 (the leaky neuron, same-sign and mixed-sign targets, through its kinks) is checked
# in tests/test_kinks.py::test_theorem4_through_kinks against the same reference.


# --- regime limits -----------------------------------------------------------------------------

def _slope(x, y):
    return np.polyfit(np.log(x), np.log(y), 1)[0]


def test_diagonal_rich_limit_approaches_min_l1(getkey):
    """α → 0 at fixed s: the limit approaches the min-ℓ1 interpolant (docs/theory §2.3 "Limits")."""
    X, y = _sparse_problem(getkey(), 20)
    w_l1 = ibflow.min_l1_interpolant(X, y)
    alphas = jnp.logspace(-2, -12, 6)
    Q = eqx.filter_vmap(
        lambda a: ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.5, dim=D))(alphas)
    res = eqx.filter_vmap(lambda Q: ibflow.minimize_regularizer(Q, X, y, throw=False))(Q)
    assert np.all(np.asarray(res.converged))
    dist = _relative(res.w, jnp.asarray(w_l1))
    assert np.all(np.diff(dist) < 0), dist
    assert dist[-1] < 2e-3, dist
    # Measured: a power law, distance ∝ α^0.33 on this problem (0.54, 0.15, 0.040, 0.0090,
    # 0.0020, 4.4e-4 for α = 1e-2 … 1e-12), far faster than the 1/ln(1/k) of the value gap.
    assert 0.25 < _slope(np.asarray(alphas), dist) < 0.45, dist


def test_diagonal_kernel_limits_approach_weighted_l2(getkey):
    """s → 1 at fixed α and α → ∞ at fixed s: the limit approaches the weighted-ℓ2 (NTK)
    interpolant ``argmin Σ wᵢ²/(2kᵢ)`` (docs/theory §2.3 "Limits"), with distance ∝ 1/k²
    (``q_k(x) = x²/2k − x⁴/6k³ + …``)."""
    X, y = _sparse_problem(getkey(), 20)
    s_i = jax.random.uniform(getkey(), (D,), minval=-0.5, maxval=0.5)  # unequal k_i

    def distance(alpha, s):
        Q = ibflow.DiagonalNetRegularizer.from_scale_shape(alpha, s, dim=D)
        w = ibflow.minimize_regularizer(Q, X, y, throw=False).w
        ntk = ibflow.minimize_regularizer(Q.ntk_limit(), X, y, throw=False).w
        weights = Q.ntk_limit().weights  # closed form of the weighted-ℓ2 interpolant
        closed = X.T @ jnp.linalg.solve(X @ (X.T / weights[:, None]), y) / weights
        return jnp.linalg.norm(w - ntk) / jnp.linalg.norm(ntk), jnp.linalg.norm(ntk - closed)

    alphas = jnp.logspace(0, 3, 4)
    d_alpha, closed_err = jax.vmap(lambda a: distance(a, s_i))(alphas)
    one_minus_s = jnp.logspace(-1, -4, 4)
    shapes = (1 - one_minus_s)[:, None] * jnp.sign(s_i + 1e-3)
    d_shape, _ = jax.vmap(lambda s: distance(1.0, s))(shapes)
    d_alpha, d_shape = np.asarray(d_alpha), np.asarray(d_shape)
    assert np.max(np.asarray(closed_err)) < 1e-10
    assert np.all(np.diff(d_alpha) < 0) and np.all(np.diff(d_shape) < 0), (d_alpha, d_shape)
    assert abs(_slope(np.asarray(alphas), d_alpha) + 2) < 0.1, d_alpha
    assert abs(_slope(np.asarray(one_minus_s), d_shape) - 2) < 0.1, d_shape
    # Unequal k_i: the limit is weighted, not plain ℓ2 (docs/theory [V]: 0.55 at α = 10).
    l2 = ibflow.min_l2_interpolant(X, y)
    Q = ibflow.DiagonalNetRegularizer.from_scale_shape(1e3, s_i * 1.8, dim=D)
    w = ibflow.minimize_regularizer(Q, X, y).w
    assert float(jnp.linalg.norm(w - l2) / jnp.linalg.norm(l2)) > 1e-2


def test_single_neuron_vanishing_init_approaches_min_l2(getkey):
    """Theorem 3 (docs/theory [AZ-T3]): α → 0 at fixed s gives ``X⁺y`` with distance ∝ α^{1/2}."""
    X, y = _sparse_problem(getkey(), 10)
    l2 = ibflow.min_l2_interpolant(X, y)
    alphas = jnp.logspace(-1, -7, 4)
    models = eqx.filter_vmap(lambda a: ibflow.FullyConnectedNet.from_scale_shape(
        a, 0.0, dim=D, key=jax.random.key(3)))(alphas)
    Q = eqx.filter_vmap(ibflow.implicit_bias)(models)
    res = eqx.filter_vmap(lambda Q: ibflow.minimize_regularizer(Q, X, y, throw=False))(Q)
    assert np.all(np.asarray(res.converged))
    dist = _relative(res.w, l2)
    assert np.all(np.diff(dist) < 0), dist
    assert abs(_slope(np.asarray(alphas), dist) - 0.5) < 0.05, dist
    w_l2 = ibflow.minimize_regularizer(ibflow.L2Norm(), X, y).w
    assert np.allclose(w_l2, l2, atol=1e-12)
