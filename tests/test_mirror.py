"""MirrorFlow and the potentials: GF equivalence, derivatives, Bregman-projection limits."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow as ib

POTENTIALS = {
    "quadratic": ib.QuadraticPotential(1.0),
    "cubic": ib.CubicPotential(),
    "quartic": ib.QuarticPotential(),
    "cosh": ib.CoshPotential(),
    "mixture": ib.MixturePotential(ib.CoshPotential(), 2.0),
    "function": ib.FunctionPotential(lambda x: jnp.log(jnp.cosh(x)) + 0.5 * x**2),
    "polynomial": ib.PolynomialPotential(0.5, 0.3, 0.2),
}


@pytest.mark.parametrize("name", list(POTENTIALS))
def test_potential_derivatives_and_inverse(name):
    phi = POTENTIALS[name]
    x = jnp.linspace(-3.0, 3.0, 61)
    d1 = jax.vmap(jax.grad(lambda s: phi(s)))(x)
    d2 = jax.vmap(jax.grad(jax.grad(lambda s: phi(s))))(x)
    np.testing.assert_allclose(phi.derivative(x), d1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(phi.second_derivative(x), d2, rtol=1e-12, atol=1e-12)
    assert jnp.all(phi.second_derivative(x) > 0)
    z = phi.derivative(x)
    np.testing.assert_allclose(phi.inverse_derivative(z), x, rtol=0, atol=1e-12)
    # Bregman divergence: nonnegative, zero on the diagonal.
    assert jnp.all(phi.bregman(x, 0.3) >= -1e-14) and jnp.abs(phi.bregman(0.3, 0.3)) < 1e-15


def test_polynomial_family_matches_named_potentials():
    x = jnp.linspace(-2.0, 2.0, 41)
    for poly, named in [((1, 0, 0), ib.QuadraticPotential()), ((1, 1, 0), ib.CubicPotential()),
                        ((1, 0, 1), ib.QuarticPotential())]:
        p = ib.PolynomialPotential(*[float(c) for c in poly])
        np.testing.assert_allclose(p(x), named(x), rtol=1e-15)
        np.testing.assert_allclose(p.inverse_derivative(named.derivative(x)), x, atol=1e-12)


def test_width_scaled_potential_is_the_rescaled_sum():
    phi, n = ib.QuarticPotential(), 7.0
    s = ib.WidthScaled(n)
    delta = jnp.array([0.01, -0.2, 0.05])
    value = lambda d: s.value(phi, d)
    np.testing.assert_allclose(value(delta), jnp.sum(phi(n * delta)) / n**2, rtol=1e-15)
    np.testing.assert_allclose(s.gradient(phi, delta), jax.grad(value)(delta), rtol=1e-13)
    np.testing.assert_allclose(s.hessian(phi, delta), jnp.diag(jax.hessian(value)(delta)),
                               rtol=1e-13)
    np.testing.assert_allclose(s.inverse_gradient(phi, s.gradient(phi, delta)), delta, atol=1e-14)


def test_bad_inputs():
    with pytest.raises(ValueError):
        ib.QuadraticPotential(-1.0)
    with pytest.raises(ValueError):
        ib.MixturePotential(ib.CubicPotential(), 0.0)
    with pytest.raises(ValueError):
        ib.MirrorFlow(lambda x: x**2)
    with pytest.raises(ValueError):
        ib.MirrorFlow(ib.CubicPotential(), learning_rate=-1.0)
    with pytest.raises(ValueError):
        ib.WidthScaled(0.0)


def test_mirror_flow_with_half_square_is_gradient_flow(getkey):
    X = jax.random.normal(getkey(), (3, 4))
    y = jax.random.normal(getkey(), (3,))
    model = ib.FullyConnectedNet.from_scale_shape(0.5, 0.2, dim=4, width=2, key=getkey())
    ts = jnp.linspace(0.0, 5.0, 11)
    opts = dict(save_at=ts, stiff_solver=None, target_loss=1e-20)  # explicit only: cheap compile
    gf = ib.integrate(model, X, y, **opts)
    mf = ib.integrate(model, X, y, flow=ib.MirrorFlow(ib.QuadraticPotential(0.5)), **opts)
    assert gf.converged and mf.converged
    np.testing.assert_allclose(mf.predictor, gf.predictor, rtol=0, atol=1e-10)
    np.testing.assert_allclose(mf.trajectory.predictor, gf.trajectory.predictor, atol=1e-10)
    # The learning rate rescales time only: same limit.
    mf2 = ib.integrate(model, X, y, flow=ib.MirrorFlow(ib.QuadraticPotential(1.0),
                                                        learning_rate=3.0), **opts)
    np.testing.assert_allclose(mf2.predictor, gf.predictor, atol=1e-9)


class _Linear(ib.AbstractLinearModel):
    """A model linear in its parameters: ``f(x) = <θ, x>``."""

    theta: jax.Array

    def predictor(self):
        return self.theta

    def invariants(self):
        return {}


def _numpy_bregman_projection(dphi, theta0, X, y, scale):
    """argmin Σ φ-Bregman s.t. Xθ = y by dual Newton in numpy (independent of ibflow):
    KKT ∇Φ(θ) = ∇Φ(θ₀) + Xᵀν with ∇Φ(θ) = dphi(scale·Δ)/scale (scale = n, or 1 unscaled)."""

    def invert(z):  # (dphi)⁻¹ by bisection: dphi is increasing
        lo, hi = np.full_like(z, -50.0), np.full_like(z, 50.0)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            low = dphi(mid) < z
            lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
        return 0.5 * (lo + hi)

    def theta_of(nu):
        return theta0 + invert(dphi(0.0 * theta0) + scale * (X.T @ nu)) / scale

    nu = np.zeros(X.shape[0])
    for _ in range(60):
        r = X @ theta_of(nu) - y
        eps = 1e-7
        J = np.stack([(X @ theta_of(nu + eps * e) - X @ theta_of(nu - eps * e)) / (2 * eps)
                      for e in np.eye(len(nu))], axis=1)
        nu = nu - np.linalg.solve(J, r)
    return theta_of(nu)


DPHI = {"cubic": lambda x: 3 * x * np.abs(x) + 2 * x, "quartic": lambda x: 4 * x**3 + 2 * x,
        "cosh": np.sinh}


def _problem(getkey):
    X = jax.random.normal(getkey(), (3, 6))
    y = 2.0 * jax.random.normal(getkey(), (3,))
    theta0 = 0.5 * jax.random.normal(getkey(), (6,))
    return X, y, theta0


def _check_projection(predictor, dphi, theta0, X, y, scale):
    ref = _numpy_bregman_projection(dphi, np.asarray(theta0), np.asarray(X), np.asarray(y), scale)
    np.testing.assert_allclose(predictor, ref, rtol=0, atol=1e-8)
    # and it is not the Euclidean projection (the potential matters)
    l2 = theta0 + np.linalg.pinv(np.asarray(X)) @ (np.asarray(y) - np.asarray(X @ theta0))
    assert np.max(np.abs(ref - l2)) > 1e-3


def test_mirror_flow_limit_is_bregman_projection_vmapped(getkey):
    """φ₂ = |x|³+x² and φ₃ = x⁴+x² (stacked PolynomialPotentials, different learning rates and
    initializations) through ONE vmapped integrate: each member is its own Bregman projection."""
    X, y, _ = _problem(getkey)
    thetas = 0.5 * jax.random.normal(getkey(), (2, 6))
    flows = eqx.filter_vmap(
        lambda c3, c4, lr: ib.MirrorFlow(ib.PolynomialPotential(1.0, c3, c4), learning_rate=lr))(
        jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]), jnp.array([0.7, 2.0]))
    sol = jax.vmap(lambda t, f: ib.integrate(_Linear(t), X, y, flow=f, throw=False))(thetas, flows)
    assert jnp.all(sol.converged)
    for i, name in enumerate(["cubic", "quartic"]):
        _check_projection(sol.predictor[i], DPHI[name], thetas[i], X, y, 1.0)


@pytest.mark.parametrize("name,width", [("cosh", None), ("quartic", 5.0)])
def test_mirror_flow_limit_is_bregman_projection(name, width, getkey):
    X, y, theta0 = _problem(getkey)
    scaling = ib.Unscaled() if width is None else ib.WidthScaled(width)
    flow = ib.MirrorFlow(POTENTIALS[name], scaling=scaling, learning_rate=0.7)
    sol = ib.integrate(_Linear(theta0), X, y, flow=flow)
    assert sol.converged
    _check_projection(sol.predictor, DPHI[name], theta0, X, y, 1.0 if width is None else width)
