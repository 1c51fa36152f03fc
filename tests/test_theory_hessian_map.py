"""The Hessian-map test (theory §2.1 [AZ-HMC], §2.2 [AZ-WARP]) and the predictor-space metric J Jᵀ.

References are independent of the code under test: hand-written Jacobians / invariants, an
analytic value of ∂H for the single neuron, and central finite differences.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow import (
    DiagonalInverseMetric,
    NeuronInverseMetric,
    hessian_map_asymmetry,
    inverse_metric_field,
    predictor_inverse_metric,
)

D = 5


def _stack(models):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *models)


@eqx.filter_jit
def _jjt_and_closed_form(model):
    return predictor_inverse_metric(model), inverse_metric_field(model)(model.predictor())


# --- J Jᵀ by autodiff equals the closed forms on the invariant manifold ------------------------
def test_diagonal_jjt_equals_closed_form(getkey):
    """Biased random parameters (all four vectors N(0,1)): J Jᵀ = diag(u₊²+v₊²+u₋²+v₋²) by hand,
    and = diag(sqrt(4w² + k²)) with k from [AZ-A]."""
    models = _stack([ibflow.DiagonalNet(*jax.random.normal(getkey(), (4, D))) for _ in range(10)])
    M, Mc = jax.vmap(_jjt_and_closed_form)(models)
    by_hand = jax.vmap(jnp.diag)(models.u_plus**2 + models.v_plus**2 + models.u_minus**2
                                 + models.v_minus**2)
    np.testing.assert_allclose(M, by_hand, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Mc, by_hand, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_single_neuron_jjt_equals_closed_form(getkey, sign):
    """J Jᵀ = a²I + wwᵀ (by hand), and the same as a function of w̃ and δ = a² − ‖w‖² (§2.4),
    for both signs of δ (the δ < 0 branch avoids cancellation, so test it at |δ| large too)."""
    models = []
    for scale in np.logspace(-2, 1, 10):
        a = jax.random.normal(getkey(), (1,))
        w = jax.random.normal(getkey(), (1, D))
        a, w = (scale * a, w) if sign > 0 else (a, scale * w)
        models.append(ibflow.FullyConnectedNet(first=w, second=a))
    models = _stack(models)
    M, Mc = jax.vmap(_jjt_and_closed_form)(models)
    a, w = models.second[:, 0], models.first[:, 0]
    by_hand = a[:, None, None] ** 2 * jnp.eye(D) + w[:, :, None] * w[:, None, :]
    np.testing.assert_allclose(M, by_hand, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Mc, by_hand, rtol=1e-11, atol=1e-12)


def test_leaky_neuron_and_several_neurons_jjt(getkey):
    leaky = ibflow.LeakyReLUNeuron(a=jnp.array(-0.7), w=jax.random.normal(getkey(), (D,)),
                                   slope=jnp.array(0.2))
    M, Mc = _jjt_and_closed_form(leaky)
    np.testing.assert_allclose(M, 0.49 * jnp.eye(D) + jnp.outer(leaky.w, leaky.w), rtol=1e-13)
    np.testing.assert_allclose(Mc, M, rtol=1e-12)
    fc = ibflow.FullyConnectedNet(first=jax.random.normal(getkey(), (3, D)),
                                  second=jax.random.normal(getkey(), (3,)))
    np.testing.assert_allclose(predictor_inverse_metric(fc),
                               jnp.sum(fc.second**2) * jnp.eye(D) + fc.first.T @ fc.first,
                               rtol=1e-13)
    with pytest.raises(ValueError, match="not a function of the"):
        inverse_metric_field(fc)


# --- the Hessian-map test -------------------------------------------------------------------------
@eqx.filter_jit
def _asym(field, w, warped):
    return hessian_map_asymmetry(field, w, warp=field.warp if warped else None)


@eqx.filter_jit
def _plain_and_warped(field, w):
    return hessian_map_asymmetry(field, w), hessian_map_asymmetry(field, w, warp=field.warp)


def test_diagonal_net_passes(getkey):
    """A diagonal metric with each entry a function of its own coordinate is a Hessian (§2.3)."""
    k = jnp.exp(jax.random.normal(getkey(), (10, 6)))
    w = 3 * jax.random.normal(getkey(), (10, 6))
    res = jax.vmap(lambda k, w: _asym(DiagonalInverseMetric(k), w, False))(k, w)
    assert np.all(res.absolute == 0.0)
    assert np.all(np.max(np.abs(res.derivative), axis=(1, 2, 3)) > 1e-3)  # not trivially flat


@pytest.mark.parametrize("d", [2, 12])
def test_single_neuron_fails_and_warp_repairs(getkey, d):
    """[AZ-HMC] fails for the single FC neuron for d ≥ 2 (relative asymmetry O(1), theory §2.1);
    g = |a| repairs it exactly ([AZ-WARP])."""
    deltas = jnp.array([0.0, 1.0, -0.5, 17.8, -26.7])
    w = jax.random.normal(getkey(), (deltas.shape[0], d))
    plain, warped = jax.vmap(_plain_and_warped)(NeuronInverseMetric(deltas), w)
    assert np.all(plain.relative > 0.1), plain.relative
    assert np.all(warped.relative < 1e-12), warped.relative


def test_single_neuron_exact_value():
    """Hand derivation at w̃ = r e₁, δ = 0 (a² = ‖w̃‖, H = (I − w̃w̃ᵀ/(2r²))/r): ∂₁H₂₂ = −1/r²,
    ∂₂H₂₁ = −1/(2r²), max|∂H| = 1/r², so absolute asymmetry 1/(2r²) and relative 1/2."""
    for r in (0.3, 1.0, 4.0):
        res = _asym(NeuronInverseMetric(jnp.array(0.0)), jnp.array([r, 0.0, 0.0]), False)
        np.testing.assert_allclose(res.absolute, 0.5 / r**2, rtol=1e-13)
        np.testing.assert_allclose(res.relative, 0.5, rtol=1e-13)
        np.testing.assert_allclose(res.derivative[1, 1, 0], -1 / r**2, rtol=1e-13)
        np.testing.assert_allclose(res.derivative[1, 0, 1], -0.5 / r**2, rtol=1e-13)


def test_one_dimensional_metric_always_passes():
    res = _asym(NeuronInverseMetric(jnp.array(-0.5)), jnp.array([0.7]), False)
    assert res.absolute == 0.0


def test_derivative_matches_finite_differences(getkey):
    """∂ₖ(gH)_ij by forward mode vs central differences of g(w)·inv(M(w)) (numpy)."""
    field = NeuronInverseMetric(jnp.array(0.8))
    w = jax.random.normal(getkey(), (4,))

    @jax.jit
    def gH(v):
        return field.warp(v) * jnp.linalg.inv(field(v))

    h = 1e-5
    fd = np.stack([(gH(w + h * e) - gH(w - h * e)) / (2 * h) for e in jnp.eye(4)], axis=-1)
    res = hessian_map_asymmetry(field, w, warp=field.warp)
    np.testing.assert_allclose(res.derivative, fd, rtol=1e-7, atol=1e-9)
    # inverse=False on the explicit metric gives the same derivative
    res2 = hessian_map_asymmetry(lambda v: field.warp(v) * jnp.linalg.inv(field(v)), w,
                                 inverse=False)
    np.testing.assert_allclose(res2.derivative, res.derivative, rtol=1e-10, atol=1e-12)


def test_vmap_matches_loop(getkey):
    field = NeuronInverseMetric(jnp.array(1.0))
    ws = jax.random.normal(getkey(), (4, 3))
    batched = jax.vmap(lambda w: _asym(field, w, False))(ws)
    for i in range(4):
        np.testing.assert_allclose(batched.relative[i], _asym(field, ws[i], False).relative,
                                   rtol=1e-13)


def test_sweeping_values_does_not_retrace(getkey):
    """δ and w are traced leaves: a sweep over their values compiles once (STYLE.md)."""

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def relative(field, w):
        return hessian_map_asymmetry(field, w, warp=field.warp).relative

    for delta in (0.0, 1.0, -0.5, 30.0):
        w = jax.random.normal(getkey(), (3,))
        assert relative(NeuronInverseMetric(jnp.array(delta)), w) < 1e-12


def test_bad_input():
    field = NeuronInverseMetric(jnp.array(1.0))
    with pytest.raises(ValueError, match="vector"):
        hessian_map_asymmetry(field, jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        hessian_map_asymmetry(lambda w: jnp.ones((3, 3)), jnp.ones(2))
    with pytest.raises(ValueError, match="scalar"):
        hessian_map_asymmetry(field, jnp.ones(2), warp=lambda w: w)
