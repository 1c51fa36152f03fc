"""The small linear algebra of a kinked transition, against numpy: the least move onto the
kinks (`kink_shift`: the minimal-norm solution of the held pre-activations' linear system,
numpy's pseudo-inverse the reference, for a regular system and for a singular one whose LU
factorization breaks down) and the sort of the pairs' times to their kinks (`_imminent`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ibflow._kinks.equivalent_control import kink_shift
from ibflow._kinks.kinked import _sorted_nonnegative


def _shift_reference(X, W, held, onto):
    """Per neuron k: the minimal-norm ``δw`` with ``X_H δw = −z_H ∘ onto`` over the held
    examples H (``z = X wₖ``), by numpy's pseudo-inverse."""
    z = X @ W.T
    out = np.zeros_like(W)
    for k in range(W.shape[0]):
        rows = np.flatnonzero(held[:, k])
        if rows.size:
            out[k] = np.linalg.pinv(X[rows]) @ -np.where(onto[rows, k], z[rows, k], 0.0)
    return out


@pytest.mark.parametrize("duplicated", [False, True])
def test_kink_shift_is_the_minimal_norm_move(duplicated):
    """Neuron k's pre-activations ``z_ik = ⟨x_i, w_k⟩`` (a linear map, so the Gauss–Newton
    step is exact); per neuron up to 3 held examples, some to be put on their kinks. With
    ``duplicated`` rows 0 and 1 coincide and are held together: their Gram matrix is singular
    (consistent: the two pre-activations are equal), which the LU solve cannot take, and the
    minimal-norm solution splits the move between them."""
    rng = np.random.default_rng(3)
    n, d, m = 6, 10, 4
    X = rng.standard_normal((n, d))
    if duplicated:
        X[1] = X[0]
    W = rng.standard_normal((m, d))
    held = np.zeros((n, m), dtype=bool)
    held[[0, 2, 4], 0] = held[[1, 3], 1] = held[[5], 2] = True
    held[[0, 1, 3], 3] = True
    onto = held & np.array([[True], [True], [False], [True], [False], [True]])
    got = kink_shift(lambda w: jnp.asarray(X) @ w.T, jnp.asarray(W), jnp.asarray(held),
                     jnp.asarray(onto), max_rows=4)
    expected = _shift_reference(X, W, held, onto)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)
    # The move does what it is for: onto-pairs at 0, the other held ones where they were.
    z0, z1 = X @ W.T, X @ (W + np.asarray(got)).T
    np.testing.assert_allclose(np.where(onto, z1, 0.0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.where(held & ~onto, z1 - z0, 0.0), 0.0, atol=1e-12)


def test_sorted_nonnegative_is_numpys_sort():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.exponential(size=200) * 10.0 ** rng.integers(-300, 300, 200),
                             [0.0, 0.0, np.inf, np.inf, 5e-324, 2.2250738585072014e-308,
                              np.finfo(float).max, np.nan]])
    rng.shuffle(values)
    got = np.asarray(jax.jit(_sorted_nonnegative)(jnp.asarray(values)))
    np.testing.assert_array_equal(got, np.sort(values))
