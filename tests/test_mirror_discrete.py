"""Optax GD / mirror descent: as the step shrinks the iterates approach the flow."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import ibflow as ib


class _Linear(ib.AbstractLinearModel):
    theta: jax.Array

    def predictor(self):
        return self.theta

    def invariants(self):
        return {}


def test_mirror_descent_approaches_mirror_flow(getkey):
    X = jax.random.normal(getkey(), (3, 6))
    y = 2.0 * jax.random.normal(getkey(), (3,))
    model = _Linear(0.5 * jax.random.normal(getkey(), (6,)))
    phi = ib.QuarticPotential()
    # Compare at a finite time T = η·steps (path), then at the limit.
    T = 2.0
    flow = ib.integrate(model, X, y, flow=ib.MirrorFlow(phi), save_at=jnp.array([T]))
    at_T = flow.trajectory.predictor[0]
    errors = []
    for eta in [0.02, 0.01, 0.005]:
        res = ib.descend(model, X, y, optimizer=ib.mirror_descent(phi, learning_rate=eta),
                         num_steps=int(round(T / eta)))
        errors.append(float(jnp.max(jnp.abs(res.model.predictor() - at_T))))
    # first-order method: halving the step halves the error
    assert errors[0] > errors[1] > errors[2]
    np.testing.assert_allclose(errors[0] / errors[1], 2.0, rtol=0.1)
    np.testing.assert_allclose(errors[1] / errors[2], 2.0, rtol=0.1)
    # the limit of mirror descent is the flow's (same Bregman projection, THEORY §2.1 item 5)
    res = ib.descend(model, X, y, optimizer=ib.mirror_descent(phi, learning_rate=0.05),
                     num_steps=20000)
    assert float(res.losses[-1]) < 1e-24
    np.testing.assert_allclose(res.model.predictor(), flow.predictor, atol=1e-9)
    # GD with a small step approaches gradient flow's limit too
    gd = ib.descend(model, X, y, optimizer=optax.sgd(0.05), num_steps=20000)
    gf = ib.integrate(model, X, y)
    np.testing.assert_allclose(gd.model.predictor(), gf.predictor, atol=1e-9)
    assert float(gd.losses[-1]) < 1e-24
