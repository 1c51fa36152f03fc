"""`minimize_regularizer`: against scipy SLSQP and closed forms, certificates, extremes (small k,
large |δ|), jit/vmap, and clear errors for ill-posed problems."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import ibflow


def _problem(key, n, d):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    return X, X @ jax.random.normal(kw, (d,))


def _slsqp(Q, X, b):
    """argmin Q(w) s.t. Xw = b by SLSQP from the min-ℓ2 point, exact Jacobians."""
    X, b = np.asarray(X), np.asarray(b)
    value = eqx.filter_jit(lambda Q, w: Q.value(w))
    grad = eqx.filter_jit(lambda Q, w: Q.grad(w))
    res = scipy.optimize.minimize(
        lambda w: float(value(Q, jnp.asarray(w))), np.linalg.lstsq(X, b, rcond=None)[0],
        jac=lambda w: np.asarray(grad(Q, jnp.asarray(w))), method="SLSQP",
        constraints=[{"type": "eq", "fun": lambda w: X @ w - b, "jac": lambda w: X}],
        options={"ftol": 1e-15, "maxiter": 1000})
    assert res.success, res.message
    return res.x


def _cases(key):
    k1, k2, k3 = jax.random.split(key, 3)
    d = 8
    return {
        "diag unbiased": ibflow.DiagonalNetRegularizer.from_scale_shape(
            jnp.exp(jax.random.normal(k1, (d,))), jnp.linspace(-0.8, 0.8, d)),
        "diag biased": ibflow.implicit_bias(ibflow.DiagonalNet(*jax.random.normal(k2, (4, d)))),
        "neuron delta>0": ibflow.SingleNeuronRegularizer.from_layers(
            1.5, 0.5 * jax.random.normal(k3, (d,)), final_sign=1.0),
        "neuron delta=0": ibflow.SingleNeuronRegularizer.balanced(jax.random.normal(k3, (d,))),
        "neuron delta<0": ibflow.SingleNeuronRegularizer.from_layers(
            0.3, jax.random.normal(k3, (d,)), final_sign=1.0),
        "neuron delta<0 flip": ibflow.SingleNeuronRegularizer.from_layers(
            0.3, jax.random.normal(k3, (d,)), final_sign=-1.0),
        "leaky": ibflow.implicit_bias(ibflow.LeakyReLUNeuron.from_scale_shape(
            0.5, -0.3, dim=d, slope=0.2, key=k1), final_sign=1.0),
        "weighted l2": ibflow.WeightedL2Norm(jnp.exp(jax.random.normal(k1, (d,))),
                                             jax.random.normal(k2, (d,))),
    }


@pytest.mark.parametrize("name", list(_cases(jax.random.key(0))))
def test_matches_slsqp(name, getkey):
    Q = _cases(jax.random.key(0))[name]
    X, y = _problem(getkey(), 4, 8)
    res = ibflow.minimize_regularizer(Q, X, y)
    b = Q.interpolation_targets(y)
    w_ref = _slsqp(Q, X, b)
    assert np.linalg.norm(np.asarray(res.w) - w_ref) / np.linalg.norm(w_ref) < 1e-6
    assert float(res.feasibility) < 1e-12 * float(jnp.linalg.norm(b))
    assert float(res.stationarity) < 1e-12 * max(1.0, float(jnp.linalg.norm(Q.grad(res.w))))
    # The dual variable is the Lagrange multiplier: ∇Q(w) = Xᵀν.
    assert np.allclose(Q.grad(res.w), X.T @ res.nu, atol=1e-11)


def test_quadratic_closed_forms(getkey):
    X, y = _problem(getkey(), 5, 12)
    res = ibflow.minimize_regularizer(ibflow.L2Norm(), X, y)
    assert np.allclose(res.w, np.linalg.pinv(np.asarray(X)) @ np.asarray(y), atol=1e-12)
    lam = jnp.exp(jax.random.normal(getkey(), (12,)))
    c = jax.random.normal(getkey(), (12,))
    res = ibflow.minimize_regularizer(ibflow.WeightedL2Norm(lam, c), X, y)
    Xn, Ln = np.asarray(X), np.diag(1 / np.asarray(lam))
    closed = np.asarray(c) + Ln @ Xn.T @ np.linalg.solve(Xn @ Ln @ Xn.T, np.asarray(y - X @ c))
    assert np.allclose(res.w, closed, atol=1e-12)


def test_l1_by_linear_program(getkey):
    X, _ = _problem(getkey(), 10, 40)
    w_star = jnp.zeros(40).at[:3].set(jnp.array([1.0, -2.0, 0.5]))
    y = X @ w_star
    res = ibflow.minimize_regularizer(ibflow.L1Norm(), X, y)
    assert np.allclose(res.w, ibflow.min_l1_interpolant(X, y), atol=1e-12)
    assert np.allclose(res.w, w_star, atol=1e-8)  # exact sparse recovery at n = 10, k = 3
    assert float(res.stationarity) < 1e-8 and float(res.feasibility) < 1e-8
    # Strong duality of the two independent LPs: ‖w‖₁ = ⟨y, ν⟩.
    assert float(jnp.sum(jnp.abs(res.w))) == pytest.approx(float(y @ res.nu), rel=1e-9)
    with pytest.raises(ValueError, match="host"):
        jax.jit(lambda X, y: ibflow.minimize_regularizer(ibflow.L1Norm(), X, y).w)(X, y)


def test_extreme_parameters_converge_with_certificate(getkey):
    """Small k (rich regime: plain Newton from ν = 0 overflows, docs/theory §2.3 solver tip) and
    large |δ| (SLSQP fails there, docs/theory §2.4): certified by feasibility + stationarity."""
    X, y = _problem(getkey(), 10, 30)
    extremes = [ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.3, dim=30)
                for a in (1e-30, 1e-100)]
    w0 = jax.random.normal(getkey(), (30,))
    extremes += [ibflow.SingleNeuronRegularizer.from_layers(a, w0, final_sign=s)
                 for a, s in ((1e3, 1.0), (1e-3, 1.0), (1e-3, -1.0))]
    unit = w0 / jnp.linalg.norm(w0)  # δ ≈ −400: α = 10, s = −0.95 in scale/shape form
    extremes += [ibflow.SingleNeuronRegularizer.from_layers(0.5, 20.0 * unit, final_sign=s)
                 for s in (1.0, -1.0)]
    for Q in extremes:
        res = ibflow.minimize_regularizer(Q, X, y)
        assert bool(res.converged)
        assert float(res.feasibility) < 1e-11 * float(jnp.linalg.norm(y))
        g = Q.grad(res.w)
        assert float(res.stationarity) <= 1e-9 * float(jnp.linalg.norm(g)) + 1e-12
    # Rich limit sanity: at α = 1e-100 the minimizer is the min-ℓ1 interpolant to ~1e-2.
    w_l1 = ibflow.min_l1_interpolant(X, y)
    w = ibflow.minimize_regularizer(extremes[1], X, y).w
    assert np.linalg.norm(w - w_l1) / np.linalg.norm(w_l1) < 0.05


def test_vmap_matches_loop_and_compiles_once(getkey):
    X, y = _problem(getkey(), 6, 20)
    alphas = jnp.array([1e-4, 1e-2, 1.0, 1e2])
    Qs = eqx.filter_vmap(
        lambda a: ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.5, dim=20))(alphas)
    batched = eqx.filter_vmap(lambda Q: ibflow.minimize_regularizer(Q, X, y))(Qs)
    for i, a in enumerate(alphas):
        one = ibflow.minimize_regularizer(
            ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.5, dim=20), X, y)
        assert np.allclose(batched.w[i], one.w, rtol=1e-12, atol=1e-14)
    # Parameters are traced: a sweep over values reuses one compilation.
    jitted = eqx.filter_jit(eqx.debug.assert_max_traces(
        lambda a: ibflow.minimize_regularizer(
            ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.5, dim=20), X, y).w,
        max_traces=1))
    for a in (0.1, 0.2, 0.3):
        jitted(jnp.asarray(a))
    # Differentiable through the solution map: d w / d y by autodiff vs finite differences.
    Q = ibflow.DiagonalNetRegularizer.from_scale_shape(0.1, 0.5, dim=20)
    f = lambda y: ibflow.minimize_regularizer(Q, X, y).w[0]  # noqa: E731
    e = jnp.zeros(6).at[0].set(1.0)
    fd = (f(y + 1e-6 * e) - f(y - 1e-6 * e)) / 2e-6
    assert float(jax.jacfwd(f)(y)[0]) == pytest.approx(float(fd), rel=1e-5)


def test_ill_posed_problems_raise(getkey):
    X, y = _problem(getkey(), 4, 10)
    Q = ibflow.DiagonalNetRegularizer.from_scale_shape(1.0, dim=10)
    dependent = X.at[3].set(X[0] + X[1])
    with pytest.raises(ValueError, match="rank 3 < n = 4"):
        ibflow.minimize_regularizer(Q, dependent, y)
    with pytest.raises(ValueError, match="n <= d"):
        ibflow.minimize_regularizer(ibflow.L2Norm(), jnp.ones((5, 3)), jnp.ones(5))
    with pytest.raises(ValueError, match="disagree"):
        ibflow.minimize_regularizer(Q, X, y[:3])
    with pytest.raises(ValueError, match="regularizer"):
        ibflow.minimize_regularizer(lambda w: w @ w, X, y)
    # Traced rank deficiency: a status, or an error with throw=True — never a silent answer.
    zero_row = X.at[3].set(0.0)
    solve = jax.jit(lambda X: ibflow.minimize_regularizer(Q, X, y, throw=False))
    out = solve(zero_row)
    assert not bool(out.converged)
    with pytest.raises(Exception, match="did not converge"):
        jax.jit(lambda X: ibflow.minimize_regularizer(Q, X, y).w)(zero_row)


# -- a polyhedral regularizer of one's own (the linear-program capability) ------------------------
from ibflow._theory.regularizers.base import AbstractLinearProgramRegularizer  # noqa: E402


class _WeightedL1(AbstractLinearProgramRegularizer):
    """``Q(w) = Σ cᵢ|wᵢ|``, solved by rescaling to `L1Norm` (``v = c∘w``)."""

    weights: jax.Array

    def value(self, w):
        return jnp.sum(self.weights * jnp.abs(w))

    def grad(self, w):
        return self.weights * jnp.sign(w)

    def interpolation_targets(self, y):
        return y

    def solve_interpolation(self, X, b):
        c = np.asarray(self.weights)
        v, nu, stationarity = ibflow.L1Norm().solve_interpolation(X / c, b)
        return v / c, nu, stationarity


def test_a_linear_program_regularizer_of_ones_own(getkey):
    """`minimize_regularizer` asks the regularizer to solve its LP; checked against scipy's
    LP on the weighted problem written directly (``w = p − q``, ``min Σ c(p + q)``)."""
    X, b = _problem(getkey(), 4, 9)
    c = np.asarray(0.5 + jax.random.uniform(getkey(), (9,)))
    out = ibflow.minimize_regularizer(_WeightedL1(jnp.asarray(c)), X, b)
    X_, b_ = np.asarray(X), np.asarray(b)
    ref = scipy.optimize.linprog(np.concatenate([c, c]), A_eq=np.hstack([X_, -X_]), b_eq=b_,
                                 bounds=(0, None), method="highs")
    w_ref = ref.x[:9] - ref.x[9:]
    np.testing.assert_allclose(out.w, w_ref, atol=1e-8)
    np.testing.assert_allclose(float(jnp.sum(c * jnp.abs(out.w))), ref.fun, rtol=1e-10)
    # Dual certificate: Xᵀν = c∘sign(w) on the support, |Xᵀν| ≤ c everywhere.
    corr = X_.T @ np.asarray(out.nu)
    assert np.all(np.abs(corr) <= c * (1 + 1e-8))
    support = np.abs(np.asarray(out.w)) > 1e-9
    np.testing.assert_allclose(corr[support], c[support] * np.sign(out.w[support]), atol=1e-8)


def test_result_base_converged_and_summary_for_a_batch(getkey):
    """Every result type extends one base: `converged` is ``status == converged`` per member and
    the summary counts the members by status."""
    from ibflow._result import AbstractResult

    X, y = _problem(getkey(), 5, 12)
    Qs = jax.vmap(lambda a: ibflow.DiagonalNetRegularizer.from_scale_shape(a, 0.0, dim=12))(
        jnp.array([1.0, 1e-30]))
    out = jax.vmap(lambda Q: ibflow.minimize_regularizer(Q, X, y, max_steps=5, throw=False))(Qs)
    assert isinstance(out, AbstractResult)
    np.testing.assert_array_equal(out.converged, [True, False])
    summary = out.summary()
    assert summary.startswith("RegularizerMinimum(") and "converged: 1" in summary
    assert "budget_exhausted: 1" in summary
    for name in ["Solution", "RegularizerMinimum", "DescentResult", "LimitPoint",
                 "ShapeOptimization", "VariationalSolution"]:
        assert issubclass(getattr(ibflow, name), AbstractResult), name
        assert "converged" not in vars(getattr(ibflow, name)), name  # inherited, not copied
