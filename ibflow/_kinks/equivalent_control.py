"""Filippov equivalent control: the kink slopes that keep sliding pre-activations at 0
([THEORY §8.2][theory-8-2])."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

#: A multiplier system whose solution's contributions to ż (columns scaled to unit size)
#: exceed this many times ż, or whose residual exceeds this relative size, is reported
#: degenerate.
_DEGENERATE_GROWTH = 1e8
_DEGENERATE_RESIDUAL = 1e-6


def linear_response(
    zdot: Callable[[Float[Array, "n m"]], Float[Array, "n m"]], base: Float[Array, "n m"],
    index: Int[Array, "m K"], mask: Bool[Array, "m K"],
) -> tuple[Float[Array, "n m"], Float[Array, "m K K"]]:
    """``ż`` at `base` and, per neuron j, the matrix ``∂żᵢⱼ/∂λₗⱼ`` over neuron j's examples
    ``index[j]`` (``[j, i, l]`` for examples ``index[j, i]`` and ``index[j, l]``), from one
    linearization of the affine map `zdot` (slopes (n, m) to the pre-activations' velocity
    (n, m)) and one tangent per column: neuron k's velocities depend only on neuron k's slopes,
    so a tangent that perturbs, in every neuron j where `mask` marks it, the slope of example
    ``index[j, l]`` gives column l of every neuron's matrix. Costs K + 1 evaluations of `zdot`;
    a dynamics that knows the structure supplies the same in closed form
    (`ibflow._kinks.classifier.ClassifierKinkedDynamics.slope_response`)."""
    n, m = base.shape
    zdot0, linear = jax.linearize(zdot, base)
    tangents = jnp.transpose(jax.nn.one_hot(index.T, n, dtype=base.dtype), (0, 2, 1)) * (
        mask.T[:, None, :].astype(base.dtype))  # (K, n, m)
    columns = jax.vmap(linear)(tangents)  # (K_l, n, m)
    gathered = columns[:, index, jnp.arange(m)[:, None]]  # (K_l, m, K_i)
    return zdot0, jnp.transpose(gathered, (1, 2, 0))


def equivalent_control(
    response: Callable[[Int[Array, "m K"], Bool[Array, "m K"]],
                       tuple[Float[Array, "n m"], Float[Array, "m K K"]]],
    base: Float[Array, "n m"], sliding: Bool[Array, "n m"], max_rows: int,
) -> tuple[Float[Array, "n m"], Bool[Array, ""], Float[Array, "n m"]]:
    """Slopes ``λ`` on the sliding pairs such that ``ż = 0`` there; other slopes as in `base`.

    The velocity ``ż`` of the pre-activations is affine in the slopes (the field is affine in
    ``σ'(0)`` because ``σ(0) = 0``), and neuron k's velocities depend only on neuron k's slopes,
    so the system splits into m independent systems, one per neuron, over the examples where
    that neuron slides: at most `max_rows` (static, ≤ n) per neuron, packed first in each
    neuron's row of ``index`` (m, K) with ``mask`` marking them. `response(index, mask)` gives
    ``ż`` at `base` (n, m) and each neuron's matrix over its examples (m, K, K), as
    `linear_response` does.

    Returns the slopes, ``ok`` (False when a neuron slides on more than `max_rows` examples or
    a system is singular: non-finite, large residual or an absurdly large solution) and, per
    sliding pair, its effective stiffness ``∂żᵢ/∂λᵢ`` with the other sliding pairs of its
    neuron re-solved (``1/(M⁻¹)ᵢᵢ``, a Schur complement). A slide is attracting when it is
    negative: then ``λᵢ > hi`` means that even the slope hi pushes ``zᵢ`` up. Zero off the
    sliding set.
    """
    n, m = base.shape
    counts = jnp.sum(sliding, axis=0)  # (m,)
    # Each neuron's sliding examples packed first, in order (the others 0, masked): a scatter
    # to the running count, not a sort (XLA's CPU sort took ~40% of a digits run's time).
    slot = jnp.where(sliding, jnp.cumsum(sliding, axis=0) - 1, max_rows)  # (n, m)
    neuron = jnp.arange(m)[:, None]
    index = jnp.zeros((m, max_rows), dtype=int).at[neuron.T, slot].set(
        jnp.broadcast_to(jnp.arange(n)[:, None], (n, m)), mode="drop")  # (m, K)
    mask = jnp.arange(max_rows)[None, :] < counts[:, None]  # (m, K)
    zdot0, matrix = response(index, mask)  # (n, m), (m, K_i, K_l)
    eye = jnp.eye(mask.shape[1], dtype=base.dtype)
    pairs = mask[:, :, None] & mask[:, None, :]
    # Columns scaled to unit size: a column is one example's effect on ż, which shrinks with
    # its loss derivative (a well-classified example's can be 1e-10 of another's late in a
    # classifier's flow). The growth test then asks for contributions ``u`` no absurdly larger
    # than ``ż`` itself, not for slopes below a fixed size: a pair taken into the sliding set
    # tentatively needs a huge slope when its own column is tiny, and that only means it
    # crosses (measured: digits, σ = 1e-5, ended `degenerate_sliding` at loss 9e-12).
    column = jnp.max(jnp.abs(jnp.where(pairs, matrix, 0.0)), axis=1)  # (m, K_l)
    column = jnp.where(mask & (column > 0), column, 1.0)
    system = jnp.where(pairs, matrix, eye) / column[:, None, :]
    rhs = jnp.where(mask, -zdot0[index, neuron], 0.0)
    # One row: a division (see `ibflow._kinks.kinked._system_sizes`).
    u = (rhs / system[..., 0] if max_rows == 1
         else jnp.linalg.solve(system, rhs[..., None])[..., 0])
    delta = u / column
    residual = jnp.einsum("kij,kj->ki", system, u) - rhs
    scale = jnp.max(jnp.abs(rhs)) + jnp.finfo(base.dtype).tiny
    ok = ((jnp.max(counts) <= max_rows) & jnp.all(jnp.isfinite(delta))
          & (jnp.max(jnp.abs(residual)) <= _DEGENERATE_RESIDUAL * scale)
          & (jnp.max(jnp.abs(u)) <= _DEGENERATE_GROWTH * scale))
    slopes = base.at[index, neuron].add(jnp.where(mask, delta, 0.0))
    # (M⁻¹)ᵢᵢ = (S⁻¹)ᵢᵢ / columnᵢ for M = S·diag(column).
    inverse_diagonal = (1.0 / system[..., 0] if max_rows == 1 else jnp.diagonal(
        jnp.linalg.inv(system), axis1=1, axis2=2)) / column
    stiffness = jnp.zeros_like(base).at[index, neuron].add(
        jnp.where(mask, 1.0 / inverse_diagonal, 0.0))
    return slopes, ok, stiffness
