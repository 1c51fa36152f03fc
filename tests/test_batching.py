"""`ibflow._batching.compacting_while_loop`: the same results as ``lax.while_loop`` for every
member, whatever the batch, while the batch compacts under ``vmap``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ibflow._batching import MIN_BATCH, SHRINK, compacting_while_loop


def _cond(operands, state):
    limit, _ = operands
    return state[1] < limit


def _body(operands, state):
    # Heron's iteration for sqrt(a), counted: members stop after their own `limit` steps.
    _, a = operands
    x, count = state
    return 0.5 * (x + a / x), count + 1


def _plain(limit, a, x0):
    return jax.lax.while_loop(lambda s: _cond((limit, a), s), lambda s: _body((limit, a), s),
                              (x0, jnp.array(0)))


def _compacting(limit, a, x0):
    return compacting_while_loop(_cond, _body, (x0, jnp.array(0)), (limit, a))


@pytest.mark.parametrize("size", [1, 7, 16, 70, 300])
def test_vmap_matches_the_plain_loop_member_by_member(size):
    """Iteration counts from 0 to 40, in an order that puts slow members everywhere: the batch
    compacts (sizes ≥ SHRINK·MIN_BATCH) and every member ends where it ends alone."""
    rng = np.random.default_rng(size)
    limit = jnp.asarray(rng.integers(0, 41, size))
    a = jnp.asarray(rng.uniform(0.5, 50.0, size))
    x0 = jnp.asarray(rng.uniform(1.0, 10.0, size))
    got = jax.jit(jax.vmap(_compacting))(limit, a, x0)
    want = jax.vmap(_plain)(limit, a, x0)
    np.testing.assert_array_equal(got[1], limit)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-15)
    # Alone, one member at a time.
    for i in rng.choice(size, min(size, 3), replace=False):
        alone = _compacting(limit[i], a[i], x0[i])
        assert int(alone[1]) == int(limit[i])
        np.testing.assert_allclose(alone[0], got[0][i], rtol=1e-15)


def test_unbatched_operands_and_state():
    """An operand shared by the batch (unbatched `a`) and an unbatched initial state."""
    limit = jnp.arange(64) % 9
    got = jax.vmap(lambda m: compacting_while_loop(_cond, _body, (jnp.array(3.0), jnp.array(0)),
                                                   (m, jnp.array(2.0))))(limit)
    want = jax.vmap(lambda m: _plain(m, jnp.array(2.0), jnp.array(3.0)))(limit)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-15)


def test_nested_vmap():
    limit = jnp.asarray(np.random.default_rng(1).integers(0, 20, (3, 40)))
    a = jnp.linspace(1.0, 9.0, 40)
    got = jax.vmap(jax.vmap(_compacting, in_axes=(0, 0, None)), in_axes=(0, None, None))(
        limit, a, jnp.array(2.0))
    want = jax.vmap(jax.vmap(_plain, in_axes=(0, 0, None)), in_axes=(0, None, None))(
        limit, a, jnp.array(2.0))
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-15)


def test_the_batch_compacts():
    """A batch of more than SHRINK·(MIN_BATCH − 1) members gathers its stragglers (a sort of the
    running flags, and one more while loop per level); a smaller one and a single member
    run the plain loop."""
    def text(size):
        args = (jnp.zeros(size, int), jnp.ones(size), jnp.ones(size))
        return str(jax.make_jaxpr(jax.vmap(_compacting))(*args))

    assert "sort" in text(SHRINK * MIN_BATCH)
    assert "sort" not in text(SHRINK * (MIN_BATCH - 1))
    assert "sort" not in str(jax.make_jaxpr(_compacting)(0, 1.0, 1.0))


def test_grad_through_stopped_operands():
    """Run on stopped gradients (as the Newton tail does), the loop is invisible to jax.grad of
    what surrounds it: here d/da of sqrt(a) computed by the loop, then corrected by one exact
    Newton step with live gradients."""
    def f(a):
        root = jax.vmap(lambda a: _compacting(jnp.array(30), jax.lax.stop_gradient(a),
                                              jnp.array(1.0))[0])(a)
        return jnp.sum(0.5 * (root + a / root))

    a = jnp.linspace(1.0, 4.0, 64)
    np.testing.assert_allclose(jax.grad(f)(a), 0.5 / jnp.sqrt(a), rtol=1e-12)
