"""The Runge–Kutta stage sums of ibflow's solver steps (`ibflow._solver_step`): the unrolled sum
equals Diffrax's ``tensordot`` (batched or not), it is used only while ibflow traces a step,
and a vmapped solve with it takes the same steps as the members alone."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from diffrax._solver import runge_kutta

from ibflow._solver_step import stage_sum, traced_once


@pytest.mark.parametrize("shape", [(7,), (7, 5), (4, 3, 2)])
def test_stage_sum_is_the_tensordot(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape[0])
    b = {"x": rng.standard_normal(shape), "y": rng.standard_normal((shape[0], 3))}
    ours = stage_sum(jnp.asarray(a), jax.tree_util.tree_map(jnp.asarray, b))
    for key, leaf in b.items():
        np.testing.assert_allclose(ours[key], np.tensordot(a, leaf, axes=1), rtol=1e-14,
                                   atol=1e-14)
    # Batched over the stage buffer (the layout a vmapped solve has), and under jit.
    batch = rng.standard_normal((3, *shape))
    out = jax.jit(jax.vmap(lambda leaf: stage_sum(jnp.asarray(a), leaf)))(batch)
    np.testing.assert_allclose(out, np.einsum("s,bs...->b...", a, batch), rtol=1e-14,
                               atol=1e-14)


def _solve(solver, y0):
    term = dfx.ODETerm(lambda t, y, args: -jnp.array([[0.0, 1.0], [-1.0, 0.0]]) @ y - 0.1 * y)
    return dfx.diffeqsolve(term, solver, 0.0, 5.0, None, y0,
                           stepsize_controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                           max_steps=10_000)


def test_steps_use_the_sum_only_while_traced():
    original = runge_kutta.vector_tree_dot
    y0s = jnp.array([[1.0, 0.0], [0.3, -2.0], [0.0, 0.5]])
    ours = jax.vmap(lambda y0: _solve(traced_once(dfx.Tsit5()), y0))(y0s)
    assert runge_kutta.vector_tree_dot is original  # restored after the trace
    for y0, y1, steps in zip(y0s, ours.ys[:, -1], ours.stats["num_steps"]):
        alone = _solve(dfx.Tsit5(), y0)  # Diffrax's own step, unbatched
        assert int(steps) == int(alone.stats["num_steps"])
        np.testing.assert_allclose(y1, alone.ys[-1], rtol=1e-12, atol=1e-14)
        # The exact solution: a damped rotation.
        rotation = np.array([[np.cos(5.0), -np.sin(5.0)], [np.sin(5.0), np.cos(5.0)]])
        np.testing.assert_allclose(y1, np.exp(-0.5) * rotation @ np.asarray(y0), atol=1e-8)
