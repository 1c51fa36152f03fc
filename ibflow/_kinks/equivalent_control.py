"""Filippov equivalent control: the kink slopes that keep sliding pre-activations at 0
(THEORY §8.2)."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

#: A multiplier system whose solution changes the slopes by more than this many times the
#: slope range, or whose residual exceeds this relative size, is reported degenerate.
_DEGENERATE_GROWTH = 1e8
_DEGENERATE_RESIDUAL = 1e-6


def equivalent_control(
    zdot: Callable[[Float[Array, "n m"]], Float[Array, "n m"]], base: Float[Array, "n m"],
    sliding: Bool[Array, "n m"], span: Float[Array, ""], max_rows: int,
) -> tuple[Float[Array, "n m"], Bool[Array, ""], Float[Array, "n m"]]:
    """Slopes ``λ`` on the sliding pairs such that ``ż = 0`` there; other slopes as in `base`.

    `zdot` maps the slopes (n, m) to the velocity of the pre-activations (n, m); it is affine
    (the field is affine in ``σ'(0)`` because ``σ(0) = 0``). Neuron k's velocities depend only on
    neuron k's slopes, so the system splits into m independent systems, one per neuron, over
    the examples where that neuron slides. Their matrices come from one linearization of
    `zdot` and one tangent per sliding example (at most `max_rows`, static): a tangent that
    perturbs example l's slope in *every* neuron at once gives column l of every neuron's
    matrix. `span` is ``hi − lo``.

    Returns the slopes, ``ok`` (False when more than `max_rows` examples slide or a system is
    singular: non-finite, large residual or an absurdly large solution) and, per sliding pair,
    its effective stiffness ``∂żᵢ/∂λᵢ`` with the other sliding pairs of its neuron re-solved
    (``1/(M⁻¹)ᵢᵢ``, a Schur complement). A slide is attracting when it is negative: then
    ``λᵢ > hi`` means that even the slope hi pushes ``zᵢ`` up. Zero off the sliding set.
    """
    n = base.shape[0]
    rows_sliding = jnp.any(sliding, axis=1)
    rows = jnp.argsort(jnp.where(rows_sliding, 0, 1), stable=True)[:max_rows]
    valid = rows_sliding[rows]
    sub = sliding[rows, :] & valid[:, None]  # (K, m)
    zdot0, linear = jax.linearize(zdot, base)
    tangents = (jax.nn.one_hot(rows, n, dtype=base.dtype)[:, :, None]
                * sub[:, None, :].astype(base.dtype))  # (K, n, m)
    columns = jax.vmap(linear)(tangents)[:, rows, :]  # (K_l, K_i, m)
    matrix = jnp.transpose(columns, (2, 1, 0))  # (m, K_i, K_l)
    mask = sub.T  # (m, K)
    eye = jnp.eye(mask.shape[1], dtype=base.dtype)
    system = jnp.where(mask[:, :, None] & mask[:, None, :], matrix, eye)
    rhs = jnp.where(mask, -zdot0[rows, :].T, 0.0)
    delta = jnp.linalg.solve(system, rhs[..., None])[..., 0]
    residual = jnp.einsum("kij,kj->ki", system, delta) - rhs
    scale = jnp.max(jnp.abs(rhs)) + jnp.finfo(base.dtype).tiny
    ok = ((jnp.sum(rows_sliding) <= max_rows) & jnp.all(jnp.isfinite(delta))
          & (jnp.max(jnp.abs(residual)) <= _DEGENERATE_RESIDUAL * scale)
          & (jnp.max(jnp.abs(delta)) <= _DEGENERATE_GROWTH * span))
    slopes = base.at[rows, :].add(jnp.where(sub, delta.T, 0.0))
    inverse_diagonal = jnp.diagonal(jnp.linalg.inv(system), axis1=1, axis2=2)  # (m, K)
    stiffness = jnp.zeros_like(base).at[rows, :].add(
        jnp.where(sub, 1.0 / inverse_diagonal.T, 0.0))
    return slopes, ok, stiffness
