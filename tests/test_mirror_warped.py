"""WarpedFlow: same path and limit as the inner flow; Theorem 2's warped IMD identity."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow as ib


class _Warp(eqx.Module):
    """``g = c · |a|^p · (1 + q L)`` for the single-neuron FC net (a = second[0])."""

    c: jax.Array
    p: jax.Array
    q: jax.Array

    def __call__(self, model, loss):
        return self.c * jnp.abs(model.second[0]) ** self.p * (1 + self.q * loss)


# members: g = |a| (docs/theory §2.4), g = 1/|a|, g = 1 + 10 L (loss-dependent), g = −1 (invalid)
WARPS = dict(c=jnp.array([1.0, 1.0, 1.0, -1.0]), p=jnp.array([1.0, -1.0, 0.0, 0.0]),
             q=jnp.array([0.0, 0.0, 10.0, 0.0]))
TS = jnp.concatenate([jnp.zeros(1), jnp.geomspace(1e-3, 1e3, 3000)])


@pytest.fixture(scope="module")
def runs():
    key = jax.random.split(jax.random.key(7), 3)
    X = jax.random.normal(key[0], (2, 3))
    y = jax.random.normal(key[1], (2,))
    # δ = a² − ‖w‖² > 0 (s = 0.5), so a never changes sign (docs/theory §2.4).
    model = ib.FullyConnectedNet.from_scale_shape(0.5, 0.5, dim=3, width=1, key=key[2])
    gf = ib.integrate(model, X, y, save_at=TS)
    warps = jax.vmap(lambda c, p, q: ib.WarpedFlow(ib.GradientFlow(), _Warp(c, p, q)))(
        WARPS["c"], WARPS["p"], WARPS["q"])
    warped = jax.vmap(lambda f: ib.integrate(model, X, y, flow=f, save_at=TS,
                                             throw=False))(warps)
    return X, y, model, gf, warped


def _arc_length_path(pred):
    pred = np.asarray(pred)
    pred = pred[np.all(np.isfinite(pred), axis=1)]
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pred, axis=0), axis=1))])
    return s, pred


def test_warped_flow_same_limit_and_path(runs):
    X, y, model, gf, warped = runs
    assert gf.converged
    assert bool(jnp.all((warped.status == ib.Status.converged)[:3]))
    s0, p0 = _arc_length_path(gf.trajectory.predictor)
    for i in range(3):
        np.testing.assert_allclose(warped.predictor[i], gf.predictor, rtol=0, atol=1e-9)
        s1, p1 = _arc_length_path(warped.trajectory.predictor[i])
        common = np.linspace(0.0, 0.99 * min(s0[-1], s1[-1]), 400)
        a = np.stack([np.interp(common, s0, p0[:, j]) for j in range(3)], axis=1)
        b = np.stack([np.interp(common, s1, p1[:, j]) for j in range(3)], axis=1)
        assert np.max(np.abs(a - b)) < 1e-4 * np.max(np.abs(p0))
        # the clock did change: the warped member is elsewhere at the same time t = 1
        k = int(np.searchsorted(np.asarray(TS), 1.0))
        assert np.max(np.abs(warped.trajectory.predictor[i][k] - gf.trajectory.predictor[k])) > 1e-3


def test_warped_flow_rejects_nonpositive_speed(runs):
    """g = −1: the velocity is NaN, the solver cannot take a step, and the status says so."""
    *_, model, gf, warped = runs
    assert not bool((warped.status == ib.Status.converged)[3])
    assert float(warped.loss[3]) > 1e3 * float(gf.target_loss)


def _mirror_quantities(X, y, model, traj):
    """From the saved predictor and invariant: |a(t)|, ∇Q(w̃) = sign(a)·w = w̃/|a| and ∇L(w̃)."""
    ts = np.asarray(traj.ts)
    pred = np.asarray(traj.predictor)
    keep = np.all(np.isfinite(pred), axis=1) & (ts <= 50.0)
    ts, pred = ts[keep], pred[keep]
    delta = -float(np.asarray(model.invariants()["gram"])[0, 0])  # a² − ‖w‖²
    S = np.sqrt(np.sum(pred**2, axis=1) + delta**2 / 4)
    abs_a = np.sqrt(S + delta / 2)
    grad_q = pred / abs_a[:, None]
    grad_l = (pred @ np.asarray(X).T - np.asarray(y)) @ np.asarray(X) / X.shape[0]
    return ts, abs_a, grad_q, grad_l


def _cumulative_trapezoid(f, ts):
    steps = np.diff(ts)[:, None] * 0.5 * (f[1:] + f[:-1])
    return np.concatenate([np.zeros((1, f.shape[1])), np.cumsum(steps, axis=0)])


def test_single_neuron_warped_mirror_descent_identity(runs):
    """docs/theory §2.4: along gradient flow d/dt ∇Q(w̃) = −|a| ∇L(w̃); under the warp g = 1/|a|
    the same path is a plain IMD, d/dτ ∇Q(w̃) = −∇L(w̃). Checked by integrating the right side
    along the saved trajectory (trapezoid on 3000 log-spaced times)."""
    X, y, model, gf, warped = runs
    sign_a0 = float(jnp.sign(model.second[0]))
    for traj, power in [(gf.trajectory, 1.0), (jax.tree_util.tree_map(lambda v: v[1],
                                                                       warped.trajectory), 0.0)]:
        ts, abs_a, grad_q, grad_l = _mirror_quantities(X, y, model, traj)
        rhs = -_cumulative_trapezoid(abs_a[:, None] ** power * grad_l, ts)
        lhs = grad_q - grad_q[0]
        scale = np.max(np.abs(lhs))
        assert scale > 0.1
        np.testing.assert_allclose(lhs, rhs, rtol=0, atol=2e-4 * scale)
        # sign(a)·w recovered from the trajectory is the model's own at the end
        np.testing.assert_allclose(grad_q[0], sign_a0 * np.asarray(model.first[0]), atol=1e-12)
    # the identity discriminates: dropping |a| from the right side breaks it
    ts, abs_a, grad_q, grad_l = _mirror_quantities(X, y, model, gf.trajectory)
    wrong = -_cumulative_trapezoid(grad_l, ts)
    assert np.max(np.abs(grad_q - grad_q[0] - wrong)) > 1e-2 * np.max(np.abs(grad_q - grad_q[0]))


def test_warped_flow_bad_input():
    with pytest.raises(ValueError):
        ib.WarpedFlow(lambda m, L: 1.0, ib.GradientFlow())
    with pytest.raises(ValueError):
        ib.WarpedFlow(ib.GradientFlow(), 3.0)
