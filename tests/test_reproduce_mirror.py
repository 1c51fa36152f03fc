"""The mirror reproductions' width study (`ibflow._reproduce.mirror`): each width's members run
one after the other in one compiled program, the widths compiled on threads while others are
traced and run; every member's result is that of `ibflow.integrate` called on it alone."""

import jax
import jax.numpy as jnp
import numpy as np

import ibflow
from ibflow._reproduce import mirror as M


def test_width_study_members_are_the_flows_alone():
    widths, seeds = [64, 72], 2
    refs = np.zeros((len(M.POTENTIALS), len(M.EVAL_GRID)))
    errors, converged, between, moved, last = M.width_study(
        activation="abs", scaled=True, widths=widths, seeds=seeds, references=refs,
        data=(M.ABS_X, M.ABS_Y))
    assert converged.shape == (2, 3, 2) and converged.all()
    # References 0: each error is the member's sup norm on the grid.
    np.testing.assert_allclose(errors[-1], np.max(np.abs(last), axis=-1), rtol=1e-15)
    X, y = jnp.asarray(M.ABS_X)[:, None], jnp.asarray(M.ABS_Y)
    keys = jax.random.split(jax.random.key(72), seeds)
    for p, coeffs in enumerate(M.POTENTIALS.values()):
        net = ibflow.ShallowNet.init(72, activation="abs", bias=M.BIAS, key=keys[1])
        flow = ibflow.MirrorFlow(ibflow.PolynomialPotential(*coeffs),
                                 scaling=ibflow.WidthScaled(72.0), learning_rate=1.0 / 72)
        sol = ibflow.integrate(net, X, y, flow=flow, target_loss=M._target(M.ABS_Y),
                               formulation=M._formulation(72), **M.SOLVE)
        assert sol.status == ibflow.Status.converged
        # The same flow in another compiled program rounds differently, so its adaptive steps
        # differ a little: the nets agree to the path tolerance (rtol 1e-8; outputs ~0.3).
        np.testing.assert_allclose(last[p, 1], jax.vmap(sol.model)(jnp.asarray(M.EVAL_GRID)),
                                   rtol=0, atol=1e-8)
    # Different potentials give different nets at a finite width.
    assert between[-1] > 0 and np.all(moved > 0)
