"""Tangent kernel at initialization, NTK-limit predictor and RKHS norm (docs/theory §2.4 [AZ-F])."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow import ntk_outputs, ntk_predictor, ntk_rkhs_norm, tangent_kernel


def _stack(models):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *models)


def test_tangent_kernel_of_neurons(getkey):
    """M₀ = a₀²I + w₀w₀ᵀ (one neuron), (Σaᵢ²)I + W₀ᵀW₀ (m neurons); the NTK on data is X M₀ Xᵀ."""
    d, n = 7, 4
    X = jax.random.normal(getkey(), (n, d))
    one = ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.4, dim=d, key=getkey())
    many = ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.4, dim=d, width=4, key=getkey())
    for net in (one, many):
        M0 = jnp.sum(net.second**2) * jnp.eye(d) + net.first.T @ net.first
        np.testing.assert_allclose(ibflow.predictor_inverse_metric(net), M0, rtol=1e-13)
        np.testing.assert_allclose(tangent_kernel(net, X), X @ M0 @ X.T, rtol=1e-12)
    a0, w0 = one.second[0], one.first[0]
    np.testing.assert_allclose(ibflow.predictor_inverse_metric(one),
                               a0**2 * jnp.eye(d) + jnp.outer(w0, w0), rtol=1e-13)


def test_tangent_kernel_general_model(getkey):
    """Leaky-ReLU neuron (not linear in x): ∇_θ f = (σ(<w,x>), a σ'(<w,x>) x), by hand; the
    fixed slope contributes nothing. Cross-kernel K(X, X2) too."""
    d = 6
    X, X2 = jax.random.normal(getkey(), (5, d)), jax.random.normal(getkey(), (3, d))
    model = ibflow.LeakyReLUNeuron(a=jnp.array(-1.3), w=jax.random.normal(getkey(), (d,)),
                                   slope=jnp.array(0.2))

    def grads(X):
        z = np.asarray(X @ model.w)
        sig, dsig = np.where(z >= 0, z, 0.2 * z), np.where(z >= 0, 1.0, 0.2)
        return np.concatenate([sig[:, None], -1.3 * dsig[:, None] * np.asarray(X)], axis=1)

    G, G2 = grads(X), grads(X2)
    np.testing.assert_allclose(tangent_kernel(model, X, X2), G @ G2.T, rtol=1e-12)
    # kernel regression limit: interpolates, and matches the hand-built formula off the data
    y = jax.random.normal(getkey(), (5,))
    f0 = lambda X: jax.vmap(model)(X)  # noqa: E731
    expect = f0(X2) + G2 @ G.T @ np.linalg.solve(G @ G.T, y - f0(X))
    np.testing.assert_allclose(ntk_outputs(model, X, y, X2), expect, rtol=1e-10)
    np.testing.assert_allclose(ntk_outputs(model, X, y, X), y, rtol=1e-10)


def test_diagonal_ntk_limit_is_weighted_l2(getkey):
    """Unbiased diagonal net, per-coordinate α and s: M₀ = diag(k) and the NTK limit is the
    weighted-ℓ2 interpolant argmin Σ wᵢ²/kᵢ (docs/theory §2.3 limits), computed here by numpy's
    pseudo-inverse of X diag(√k)."""
    n, d = 6, 15
    X = jax.random.normal(getkey(), (n, d))
    y = jax.random.normal(getkey(), (n,))
    alpha = jnp.exp(jax.random.uniform(getkey(), (d,), minval=-4.0, maxval=2.0))
    s = jax.random.uniform(getkey(), (d,), minval=-0.95, maxval=0.95)
    net = ibflow.DiagonalNet.from_scale_shape(alpha, s)
    k = 4 * alpha * (1 + s**2) / (1 - s**2)
    np.testing.assert_allclose(ibflow.predictor_inverse_metric(net), jnp.diag(k), rtol=1e-12)
    root = np.sqrt(np.asarray(k))
    expect = root * (np.linalg.pinv(np.asarray(X) * root) @ np.asarray(y))
    got = ntk_predictor(net, X, y)
    np.testing.assert_allclose(got, expect, rtol=1e-9, atol=1e-12)
    # the NTK predictor minimises the RKHS norm over interpolants
    np.testing.assert_allclose(ntk_rkhs_norm(net, got), np.linalg.norm(expect / root), rtol=1e-9)
    null = np.linalg.svd(np.asarray(X))[2][n:]
    others = got + 0.1 * jax.random.normal(getkey(), (5, d - n)) @ null
    assert np.all(ntk_rkhs_norm(net, others) > ntk_rkhs_norm(net, got))


def test_rkhs_norm_against_numpy_and_outside_range(getkey):
    d = 5
    net = ibflow.FullyConnectedNet.from_scale_shape(0.5, -0.3, dim=d, key=getkey())
    w = jax.random.normal(getkey(), (3, d))
    M0 = np.asarray(net.second[0] ** 2 * jnp.eye(d) + jnp.outer(net.first[0], net.first[0]))
    v = np.asarray(w - net.predictor())
    np.testing.assert_allclose(ntk_rkhs_norm(net, w),
                               np.sqrt(np.einsum("bi,bi->b", v, np.linalg.solve(M0, v.T).T)),
                               rtol=1e-12)
    # a₀ = 0: M₀ = w₀w₀ᵀ has rank one; only the direction w₀ is in the RKHS.
    w0 = jax.random.normal(getkey(), (d,))
    rank_one = ibflow.FullyConnectedNet(first=w0[None], second=jnp.zeros(1))
    assert np.isinf(ntk_rkhs_norm(rank_one, jax.random.normal(getkey(), (d,))))
    # 2w₀ = (2‖w₀‖) ŵ₀ with eigenvalue ‖w₀‖²: norm 2.
    np.testing.assert_allclose(ntk_rkhs_norm(rank_one, 2 * w0), 2.0, rtol=1e-12)


def test_bad_input(getkey):
    leaky = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, dim=3, key=getkey())
    X, y = jnp.ones((2, 3)), jnp.ones(2)
    with pytest.raises(ValueError, match="linear in its input"):
        ntk_predictor(leaky, X, y)
    net = ibflow.FullyConnectedNet.from_scale_shape(1.0, dim=3, key=getkey())
    with pytest.raises(ValueError, match="features"):
        ntk_predictor(net, jnp.ones((2, 4)), y)
    with pytest.raises(Exception, match="singular"):  # duplicate rows: XM₀Xᵀ not invertible
        ntk_predictor(net, X, y)


# --- regime: the Mahalanobis approximation error falls like 1/α where it applies -------------
@pytest.fixture(scope="module")
def regime():
    """Single FC neuron (width 1), n = 5, d = 12, 2-sparse unit teacher r = Xw*; flow limit from
    `integrate` at α ∈ {1e2, 1e3, 1e4}, for targets relative to the initial outputs
    (y = Xw̃₀ + r; s ∈ {0, 0.5, −0.5}) and for fixed targets y = r (s ∈ {0, 0.5}).
    All 15 runs in one vmapped solve. The error is ‖w̃_GF − w̃_NTK‖ / ‖w̃_GF − w̃₀‖ (relative to
    the displacement), the normalisation that reproduces docs/theory §2.4's numbers."""
    n, d = 5, 12
    kx, ks, kinit = jax.random.split(jax.random.key(20260), 3)
    X = jax.random.normal(kx, (n, d))
    r = X @ jnp.zeros(d).at[jax.random.choice(ks, d, (2,), replace=False)].set(1.0)
    alphas = np.array([1e2, 1e3, 1e4])
    cases = [(s, True) for s in (0.0, 0.5, -0.5)] + [(s, False) for s in (0.0, 0.5)]
    models, ys = [], []
    for s, relative in cases:
        for a in alphas:
            m = ibflow.FullyConnectedNet.from_scale_shape(a, s, dim=d, width=1, key=kinit)
            models.append(m)
            ys.append(X @ m.predictor() + r if relative else r)
    models, ys = _stack(models), jnp.stack(ys)
    # Tolerances: rtol 1e-12 because the state is O(√α) while the displacement is O(1); the
    # target is relative to r (the part to be fitted). Dopri8 without a stiff tail converges in
    # < 100 steps here (see the report on Tsit5 / Kvaerno5 at large α).
    target = 1e-14 * jnp.mean(r**2) / 2

    @eqx.filter_jit
    def solve(models, ys):
        sol = jax.vmap(lambda m, y: ibflow.integrate(
            m, X, y, target_loss=target, rtol=1e-12, solver=dfx.Dopri8(), stiff_solver=None,
            throw=False))(models, ys)
        return sol, jax.vmap(lambda m, y: ntk_predictor(m, X, y))(models, ys)

    sol, w_ntk = solve(models, ys)
    assert np.all(sol.status == ibflow.Status.converged), sol.status
    w0 = jax.vmap(lambda m: m.predictor())(models)
    err = np.linalg.norm(sol.predictor - w_ntk, axis=1) / np.linalg.norm(sol.predictor - w0, axis=1)
    return alphas, {case: err[3 * i: 3 * i + 3] for i, case in enumerate(cases)}


def test_mahalanobis_error_falls_like_one_over_alpha(regime):
    alphas, err = regime
    for s in (0.0, 0.5, -0.5):
        e = err[(s, True)]
        slope = np.polyfit(np.log(alphas), np.log(e), 1)[0]
        assert -1.05 < slope < -0.95, (s, e, slope)
    # magnitude at α = 100, s = 0 (docs/theory: 2.5e-3 on its own random problem)
    assert 3e-4 < err[(0.0, True)][0] < 1e-2


def test_caveat_fixed_targets_level_off(regime):
    """y = O(1) with a biased start: the initial outputs O(α) must be undone, the lazy regime is
    never entered and the error levels off (docs/theory: 11% at s = 0, 2.2% at s = 0.5)."""
    _, err = regime
    for s in (0.0, 0.5):
        e = err[(s, False)]
        assert e[-1] > 1e-3 and e[-1] > 0.8 * e[0], (s, e)
        assert e[-1] > 20 * err[(s, True)][0]
