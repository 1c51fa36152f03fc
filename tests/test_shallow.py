"""ShallowNet: initialization of theory §3, input shapes, invariants, lazy mirror-flow training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow as ib


def test_initialization_distributions(getkey):
    n = 4000
    net = ib.ShallowNet.init(n, bias=ib.UniformBias(1.5), key=getkey())
    assert set(np.unique(np.asarray(net.w))) == {-1.0, 1.0}
    assert abs(float(jnp.mean(net.w))) < 0.06
    assert float(jnp.max(jnp.abs(net.b))) <= 1.5
    assert abs(float(jnp.var(net.b)) - ib.UniformBias(1.5).second_moment()) < 0.05
    assert float(jnp.max(jnp.abs(net.a))) == 0.0 and float(net.d) == 0.0
    gnet = ib.ShallowNet.init(n, activation="abs", bias=ib.GaussianBias(0.7), output_std=2.0,
                              output_bias_std=1.0, key=getkey())
    assert abs(float(jnp.std(gnet.b)) - 0.7) < 0.03
    # a ~ A/√n with std(A) = 2
    assert abs(float(jnp.std(gnet.a)) * np.sqrt(n) - 2.0) < 0.1
    # densities integrate to one and match their second moments
    for dist in [ib.UniformBias(1.5), ib.GaussianBias(0.7)]:
        lo, hi = dist.interval()
        t = jnp.linspace(lo, hi, 20001)
        p = dist.density(t)
        assert abs(float(jnp.trapezoid(p, t)) - 1.0) < 1e-4
        assert abs(float(jnp.trapezoid(p * t**2, t)) - float(dist.second_moment())) < 1e-4


def test_forward_shapes_and_values(getkey):
    net = ib.ShallowNet.init(5, output_std=1.0, output_bias_std=1.0, key=getkey())
    x = 0.37
    manual = jnp.sum(net.a * jnp.maximum(net.w * x - net.b, 0.0)) + net.d
    np.testing.assert_allclose(net(jnp.array(x)), manual, rtol=1e-14)
    np.testing.assert_allclose(net(jnp.array([x])), manual, rtol=1e-14)
    absnet = ib.ShallowNet(w=net.w, b=net.b, a=net.a, d=net.d, activation="abs")
    np.testing.assert_allclose(absnet(jnp.array(x)),
                               jnp.sum(net.a * jnp.abs(net.w * x - net.b)) + net.d, rtol=1e-14)
    with pytest.raises(ValueError):
        net(jnp.ones(2))
    with pytest.raises(ValueError):
        ib.ShallowNet.init(0, key=getkey())
    with pytest.raises(ValueError):
        ib.ShallowNet.init(3, activation="tanh", key=getkey())
    with pytest.raises(ValueError):
        ib.ShallowNet(w=jnp.ones(3), b=jnp.ones(2), a=jnp.ones(3), d=jnp.zeros(()))


def test_gradient_flow_invariants_and_lazy_mirror_flow(getkey):
    """GF conserves a_k² − w_k² − b_k²; a wide net trained with learning rate 1/n interpolates
    and its hidden layer barely moves (docs/theory §3.1: (w, b) lazy)."""
    X = jnp.array([[-0.8], [-0.3], [0.2], [0.7]])
    y = jnp.array([0.2, -0.1, 0.1, 0.3])
    net = ib.ShallowNet.init(16, output_std=1.0, key=getkey())
    # Integrate GF on [0, 1] only (t_max = 1: the status is then budget_exhausted by design).
    sol = ib.integrate(net, X, y, save_at=jnp.array([0.0, 0.5, 1.0]), rtol=1e-10,
                       stiff_solver=None, t_max=1.0, throw=False)
    assert bool(jnp.all(jnp.isfinite(sol.trajectory.loss)))
    assert float(sol.trajectory.loss[-1]) < float(sol.trajectory.loss[0])
    inv = sol.trajectory.invariants["balance"]
    np.testing.assert_allclose(inv, jnp.broadcast_to(inv[0], inv.shape), atol=1e-8)
    assert float(jnp.max(jnp.abs(sol.model.a - net.a))) > 1e-2  # it did train
    n = 128
    wide = ib.ShallowNet.init(n, key=getkey())
    mirror = ib.MirrorFlow(ib.QuarticPotential(), learning_rate=1.0 / n)
    msol = ib.integrate(wide, X, y, flow=mirror, rtol=1e-8, atol=1e-12, stiff_solver=None,
                        target_loss=1e-16, max_steps=100_000, throw=False)
    assert msol.converged
    np.testing.assert_allclose(jax.vmap(msol.model)(X), y, atol=1e-7)
    moved_a = float(jnp.max(jnp.abs(msol.model.a - wide.a)))
    moved_wb = float(jnp.max(jnp.abs(jnp.concatenate([msol.model.w - wide.w,
                                                      msol.model.b - wide.b]))))
    assert moved_wb < 0.2 * moved_a
