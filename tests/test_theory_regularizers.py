"""Regularizers: values against the theory's closed forms written independently, gradients against
autodiff and finite differences, gradient inverses, conjugates (Fenchel–Young), overflow
robustness, and `implicit_bias` dispatch and refusals."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow

D = 7


def _instances(key):
    """One instance of every Legendre regularizer family, with non-trivial parameters."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return {
        "diag unbiased": ibflow.DiagonalNetRegularizer.from_scale_shape(
            jnp.exp(jax.random.normal(k1, (D,))), jnp.linspace(-0.9, 0.9, D)),
        "diag biased": ibflow.implicit_bias(ibflow.DiagonalNet(*jax.random.normal(k2, (4, D)))),
        "neuron delta>0": ibflow.SingleNeuronRegularizer.from_layers(
            2.0, 0.5 * jax.random.normal(k3, (D,)), final_sign=1.0),
        "neuron delta=0": ibflow.SingleNeuronRegularizer.balanced(jax.random.normal(k3, (D,))),
        "neuron delta<0": ibflow.SingleNeuronRegularizer.from_layers(
            -0.3, jax.random.normal(k3, (D,)), final_sign=-1.0),
        "neuron delta<0 flipped": ibflow.SingleNeuronRegularizer.from_layers(
            -0.3, jax.random.normal(k3, (D,)), final_sign=1.0),
        "leaky": ibflow.implicit_bias(ibflow.LeakyReLUNeuron.from_scale_shape(
            0.5, 0.3, dim=D, slope=0.2, key=k4)),
        "l2": ibflow.L2Norm(),
        "weighted l2": ibflow.WeightedL2Norm(jnp.exp(jax.random.normal(k1, (D,))),
                                             jax.random.normal(k2, (D,))),
    }


@pytest.mark.parametrize("name", list(_instances(jax.random.key(0))))
def test_gradient_inverse_and_conjugate(name, getkey):
    Q = _instances(jax.random.key(0))[name]
    w = jax.random.normal(getkey(), (D,))
    g = Q.grad(w)
    # ∇Q against autodiff of the value and a central finite difference.
    assert np.allclose(g, jax.grad(Q.value)(w), rtol=1e-10, atol=1e-12)
    h = 1e-6
    fd = np.array([(Q.value(w + h * e) - Q.value(w - h * e)) / (2 * h) for e in np.eye(D)])
    assert np.allclose(g, fd, rtol=1e-6, atol=1e-8)
    # (∇Q)⁻¹ inverts ∇Q, and ∇Q* = (∇Q)⁻¹.
    assert np.allclose(Q.grad_inverse(g), w, rtol=1e-11, atol=1e-12)
    assert np.allclose(jax.grad(Q.conjugate)(g), w, rtol=1e-10, atol=1e-12)
    # Fenchel–Young equality fixes the conjugate's constant: Q(w) + Q*(∇Q(w)) = ⟨w, ∇Q(w)⟩.
    assert float(Q.value(w) + Q.conjugate(g)) == pytest.approx(float(w @ g), rel=1e-10, abs=1e-12)
    # Convexity: Fenchel–Young inequality at unrelated points.
    v, z = jax.random.normal(getkey(), (2, D))
    assert float(Q.value(v) + Q.conjugate(z)) >= float(v @ z) - 1e-12


def _q_authors(x, k):
    """The authors' ``q_func`` (docs/theory §2.3, [C])."""
    return k / 4 * (1 - np.sqrt(1 + 4 * x**2 / k**2) + 2 * x / k * np.arcsinh(2 * x / k))


def test_diagonal_value_matches_theory_closed_form(getkey):
    net = ibflow.DiagonalNet(*(0.7 * jax.random.normal(getkey(), (4, D))))
    Q = ibflow.implicit_bias(net)
    up, vp, um, vm = (np.asarray(a) for a in (net.u_plus, net.v_plus, net.u_minus, net.v_minus))
    k = np.sqrt(((up - vp) ** 2 + (um + vm) ** 2) * ((up + vp) ** 2 + (um - vm) ** 2))  # [AZ-A]
    w0 = up * vp - um * vm
    assert np.allclose(Q.k, k, rtol=1e-13) and np.allclose(Q.w0, w0, rtol=1e-13)
    w = np.asarray(jax.random.normal(getkey(), (D,)))
    expected = np.sum(_q_authors(w, k) - w / 2 * np.arcsinh(2 * w0 / k))
    assert float(Q.value(jnp.asarray(w))) == pytest.approx(expected, rel=1e-12)
    assert np.allclose(Q.grad(Q.w0), 0.0, atol=1e-14)  # ∇Q(w₀) = 0: Bregman form
    # Unbiased scale/shape form: k = 2(u₀² + v₀²) = 4α(1+s²)/(1−s²) ([AZ-T1], [AZ-7.1]).
    alpha, s = 0.3, np.linspace(-0.9, 0.9, D)
    net = ibflow.DiagonalNet.from_scale_shape(alpha, s)
    k_t1 = 2 * (np.asarray(net.u_plus) ** 2 + np.asarray(net.v_plus) ** 2)
    assert np.allclose(ibflow.implicit_bias(net).k, k_t1, rtol=1e-13)
    assert np.allclose(ibflow.DiagonalNetRegularizer.from_scale_shape(alpha, s, dim=D).k,
                       4 * alpha * (1 + s**2) / (1 - s**2), rtol=1e-13)


def test_tied_weights(getkey):
    """Tied ``w = u₊² − u₋²``: k = 4|u₊u₋|; with u₊ = u₋ = √α it is Theorem 1 at s = 0, and
    Woodworth et al.'s ``α²[2 − sqrt(4 + z²) + z arcsinh(z/2)]``, z = w/α², up to the factor ½."""
    up, um = jnp.abs(jax.random.normal(getkey(), (2, D)))
    Q = ibflow.DiagonalNetRegularizer.from_tied(up, um)
    assert np.allclose(Q.k, 4 * np.abs(up * um)) and np.allclose(Q.w0, up**2 - um**2)
    a = 0.2
    Q = ibflow.DiagonalNetRegularizer.from_tied(jnp.full(D, a), jnp.full(D, a))
    w = np.asarray(jax.random.normal(getkey(), (D,)))
    z = w / a**2
    woodworth = np.sum(a**2 * (2 - np.sqrt(4 + z**2) + z * np.arcsinh(z / 2)))
    assert 2 * float(Q.value(jnp.asarray(w))) == pytest.approx(woodworth, rel=1e-12)


def _q_delta_code(rho, delta):
    """The authors' first form of q_δ (docs/theory [AZ-FC-Q], [C])."""
    S = np.sqrt(rho**2 + delta**2 / 4)
    return (rho**2 - delta / 2 * (delta / 2 + S)) * np.sqrt(S - delta / 2) / rho


@pytest.mark.parametrize("delta", [2.0, 0.0, -1.5])
def test_single_neuron_value_matches_theory(delta, getkey):
    a0 = np.sqrt(1.0 + max(delta, 0.0))
    w0 = np.array(jax.random.normal(getkey(), (D,)))
    w0 *= np.sqrt(a0**2 - delta) / np.linalg.norm(w0)
    model = ibflow.FullyConnectedNet(jnp.asarray(w0)[None], jnp.asarray([-a0]))
    Q = ibflow.implicit_bias(model, final_sign=-1.0)
    assert float(Q.delta) == pytest.approx(delta, abs=1e-12)
    w = np.asarray(jax.random.normal(getkey(), (D,)))
    rho = np.linalg.norm(w)
    w_tilde0 = -a0 * w0
    coef = 1.5 * np.sqrt(np.sqrt(np.sum(w_tilde0**2) + delta**2 / 4) - delta / 2)
    expected = _q_delta_code(rho, delta) - coef * (w_tilde0 / np.linalg.norm(w_tilde0)) @ w
    assert float(Q.value(jnp.asarray(w))) == pytest.approx(expected, rel=1e-12)
    assert np.allclose(Q.grad(jnp.asarray(w_tilde0)), 0.0, atol=1e-12)
    if delta == 0.0:  # Proposition 1: ‖w̃‖^{3/2} − (3/2)‖w̃₀‖^{1/2}⟨ŵ₀, w̃⟩
        prop1 = rho**1.5 - 1.5 * np.linalg.norm(w_tilde0) ** 0.5 * (
            w_tilde0 / np.linalg.norm(w_tilde0)) @ w
        assert float(Q.value(jnp.asarray(w))) == pytest.approx(prop1, rel=1e-12)
        Qb = ibflow.SingleNeuronRegularizer.balanced(jnp.asarray(w_tilde0))
        assert float(Qb.value(jnp.asarray(w))) == pytest.approx(prop1, rel=1e-12)


def test_overflow_robust_extremes():
    """Small k and large |δ| (docs/theory §2.3 solver tip, §2.4): finite and consistent."""
    w = jnp.array([1.0, -2.0, 0.5, 1e-3])
    for k in (1e-30, 1e-200, 1e10):
        Q = ibflow.DiagonalNetRegularizer(k=jnp.full(4, k), w0=jnp.zeros(4))
        vals = [Q.value(w), Q.grad(w), Q.conjugate(Q.grad(w)), Q.grad_inverse(Q.grad(w))]
        assert all(np.all(np.isfinite(v)) for v in vals), (k, vals)
        assert np.allclose(Q.grad_inverse(Q.grad(w)), w, rtol=1e-12, atol=1e-300)
        expected = np.sum(np.abs(w) / 2 * (np.log(4 * np.abs(w) / k) - 1)) if k < 1 else None
        if expected is not None:  # rich-limit expansion q_k(x) ≈ |x|/2 (ln(4|x|/k) − 1)
            assert float(Q.value(w)) == pytest.approx(expected, rel=1e-12)
    for delta in (1e8, -1e8):
        Q = ibflow.SingleNeuronRegularizer(delta=jnp.asarray(delta), anchor=jnp.zeros(4))
        assert np.isfinite(float(Q.value(w)))
        # Bounded-in-‖w̃‖ check of the stable forms: value at 0 is q_δ(0) (−δ^{3/2}/2 or 0).
        q0 = float(Q.value(jnp.zeros(4)))
        assert q0 == pytest.approx(-0.5 * delta**1.5 if delta > 0 else 0.0, rel=1e-12)
        if delta > 0:
            assert np.allclose(Q.grad_inverse(Q.grad(w)), w, rtol=1e-9)
    # For δ ≪ 0, ∇Q ≈ (3/2)sqrt(−δ)·ŵ barely depends on ‖w̃‖: inverting it loses
    # ~log10(δ²/‖w̃‖²) digits intrinsically (δ = −1e8 keeps none); at δ = −1e3 ~7 are lost.
    Q = ibflow.SingleNeuronRegularizer(delta=jnp.asarray(-1e3), anchor=jnp.zeros(4))
    assert np.allclose(Q.grad_inverse(Q.grad(w)), w, rtol=1e-7)


def test_leaky_interpolation_targets():
    y = jnp.array([1.0, -1.0, 0.0])
    model = ibflow.LeakyReLUNeuron(a=jnp.asarray(2.0), w=jnp.ones(3), slope=jnp.asarray(0.25))
    Q = ibflow.implicit_bias(model)
    assert np.allclose(Q.interpolation_targets(y), [1.0, -4.0, 0.0])  # σ⁻¹(y) for a > 0
    model = ibflow.LeakyReLUNeuron(a=jnp.asarray(-2.0), w=jnp.ones(3), slope=jnp.asarray(0.25))
    Q = ibflow.implicit_bias(model)
    assert np.allclose(Q.interpolation_targets(y), [4.0, -1.0, 0.0])  # −σ⁻¹(−y) for a < 0
    # Round trip through the model: f(x) = sign(a) σ(sign(a)⟨w̃, x⟩) gives back y.
    b = Q.interpolation_targets(y)
    f = -jnp.where(-b >= 0, -b, 0.25 * -b)
    assert np.allclose(f, y)


def test_implicit_bias_refusals(getkey):
    wide = ibflow.FullyConnectedNet.from_scale_shape(0.1, 0.0, dim=D, width=3, key=getkey())
    with pytest.raises(ibflow.NoExactRegularizer, match="§2.6"):
        ibflow.implicit_bias(wide)
    assert issubclass(ibflow.NoExactRegularizer, ValueError)
    with pytest.raises(ibflow.NoExactRegularizer):
        ibflow.implicit_bias(ibflow.FullyConnectedNet(jnp.zeros((2, D)), jnp.zeros(2)))
    negative = ibflow.FullyConnectedNet.from_scale_shape(0.1, -0.5, dim=D, key=getkey())
    with pytest.raises(ValueError, match="final_sign"):
        ibflow.implicit_bias(negative)
    Q = ibflow.implicit_bias(negative, final_sign=-1.0)
    assert isinstance(Q, ibflow.SingleNeuronRegularizer)
    positive = ibflow.FullyConnectedNet.from_scale_shape(0.1, 0.5, dim=D, key=getkey())
    wrong = -jnp.sign(positive.second[0])
    with pytest.raises(ValueError, match="impossible"):
        ibflow.implicit_bias(positive, final_sign=wrong)
    with pytest.raises(ValueError, match="single-neuron"):
        ibflow.implicit_bias(ibflow.DiagonalNet.from_scale_shape(1.0, dim=D), final_sign=1.0)
    with pytest.raises(ValueError, match="k_i = 0"):
        ones = jnp.ones(D)
        ibflow.implicit_bias(ibflow.DiagonalNet(ones, -ones, ones, ones))
    # Under jit the δ < 0 check becomes a runtime error.
    with pytest.raises(Exception, match="final_sign"):
        eqx.filter_jit(ibflow.implicit_bias)(negative)


def test_implicit_bias_vmaps_over_models(getkey):
    models = eqx.filter_vmap(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.3, dim=D))(
        jnp.array([0.1, 1.0]))
    Q = eqx.filter_vmap(ibflow.implicit_bias)(models)
    assert Q.k.shape == (2, D)
    assert np.allclose(Q.k[:, 0], 4 * jnp.array([0.1, 1.0]) * (1 + 0.09) / (1 - 0.09))


# -- theory as a capability: a model of one's own brings its regularizer --------------------------
# (The capability classes are imported from their modules until ibflow re-exports them.)
from ibflow._models.base import AbstractImplicitBiasModel, AbstractLinearModel  # noqa: E402

from .helpers import every_model  # noqa: E402


class _TiedDiagonal(AbstractLinearModel, AbstractImplicitBiasModel):
    """A model written outside ibflow: the tied diagonal net ``w = u₊² − u₋²`` (Woodworth et
    al. 2020), which offers its regularizer without any edit to ibflow."""

    u_plus: jax.Array
    u_minus: jax.Array

    def predictor(self):
        return self.u_plus**2 - self.u_minus**2

    def implicit_bias(self, *, final_sign=None):
        return ibflow.DiagonalNetRegularizer.from_tied(self.u_plus, self.u_minus)

    def implicit_bias_sign(self):
        return None


def test_a_model_of_ones_own_brings_its_implicit_bias(getkey):
    """`implicit_bias` asks the model, so a new model needs no edit of ibflow; the regularizer's
    minimizer is checked against the flow itself (an independent computation: the parameters'
    ODE integrated to convergence)."""
    X = jax.random.normal(getkey(), (3, 6))
    y = X @ jax.random.normal(getkey(), (6,))
    model = _TiedDiagonal(0.5 + 0.3 * jax.random.uniform(getkey(), (6,)),
                          0.5 + 0.3 * jax.random.uniform(getkey(), (6,)))
    Q = ibflow.implicit_bias(model)
    limit = ibflow.minimize_regularizer(Q, X, y).w
    flow = ibflow.integrate(model, X, y, rtol=1e-10, atol=1e-12, target_loss=1e-24)
    assert bool(flow.converged)
    np.testing.assert_allclose(flow.model.predictor(), limit, rtol=1e-5, atol=1e-7)
    # The same model without the capability is refused by name.
    with pytest.raises(ibflow.NoExactRegularizer, match="AbstractImplicitBiasModel"):
        ibflow.implicit_bias(ibflow.LinearModel(jnp.ones(6)))


def test_every_model_either_offers_a_regularizer_or_is_refused():
    capable = set()
    for name, (model, *_) in every_model(jax.random.key(0)).items():
        if not isinstance(model, ibflow.AbstractModel):  # a plain Equinox module
            with pytest.raises(ValueError, match="must be an ibflow model"):
                ibflow.implicit_bias(model)
            continue
        try:
            Q = ibflow.implicit_bias(model, final_sign=(
                model.implicit_bias_sign() if isinstance(model, AbstractImplicitBiasModel)
                else None))
        except ibflow.NoExactRegularizer:
            continue
        assert isinstance(Q, ibflow.AbstractRegularizer)
        capable.add(name)
    # The fully connected net of every_model has width 2: capable class, no exact regularizer.
    assert capable == {"diagonal", "leaky-neuron"}
