"""Filippov equivalent control: the kink slopes that keep sliding pre-activations at 0
([THEORY §8.2][theory-8-2])."""

from collections.abc import Callable

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, Bool, Float, Int

#: A multiplier system whose solution's contributions to ż (columns scaled to unit size)
#: exceed this many times ż, or whose residual exceeds this relative size, is reported
#: degenerate.
_DEGENERATE_GROWTH = 1e8
_DEGENERATE_RESIDUAL = 1e-6
#: Singular values of a multiplier system (columns scaled to unit size) below this fraction of
#: its largest count as 0 (`_least_squares`), and so does a pseudo-inverse diagonal entry below
#: this fraction of the pseudo-inverse's norm. An LU pivot below this fraction of the largest
#: sends the system to `_least_squares`.
_RANK_TOLERANCE = 1e-12


def _factor(system):
    """The LU factors of `system` and whether a pivot is (nearly) 0, i.e. the system may be
    rank-deficient."""
    lu, pivots = jsl.lu_factor(system)
    pivot = jnp.abs(jnp.diagonal(lu, axis1=-2, axis2=-1))
    return (lu, pivots), ~(jnp.min(pivot, axis=-1) > _RANK_TOLERANCE * jnp.max(pivot, axis=-1))


def _solve(factor, rhs):
    return jsl.lu_solve(factor, rhs[..., None])[..., 0]


@jax.custom_jvp
def _regular(system, rhs):
    """``S⁻¹ rhs`` from one LU factorization per neuron, and whether a pivot is (nearly) 0,
    i.e. the system may be rank-deficient.

    Its derivative is the implicit one, ``du = S⁻¹ (d rhs − dS u)``: one more solve with the
    factors, which needs ``u`` first. (JAX's own rules for ``lu_factor`` and ``lu_solve``
    differentiate with triangular solves that do not depend on each other, which XLA may run
    at once, `ibflow._lapack`; the tail's exact Jacobian differentiates the multiplier
    solve.)"""
    factor, small = _factor(system)
    return _solve(factor, rhs), small


@_regular.defjvp
def _regular_jvp(primals, tangents):
    system, rhs = primals
    d_system, d_rhs = tangents
    factor, small = _factor(system)
    u = _solve(factor, rhs)
    du = _solve(factor, d_rhs - jnp.einsum("...ij,...j->...i", d_system, u))
    return (u, small), (du, np.zeros(small.shape, dtype=jax.dtypes.float0))


def _inverse(system):
    factor, _ = _factor(system)
    eye = jnp.broadcast_to(jnp.eye(system.shape[-1], dtype=system.dtype), system.shape)
    return jsl.lu_solve(factor, eye)


@jax.custom_jvp
def _inverse_diagonal(system):
    """The diagonal of ``S⁻¹`` (S regular), by its own LU factorization: `_minimal_norm`
    computes it in a branch that runs after the solve, so that no two LAPACK calls can run at
    once (`ibflow._lapack`), and where a site uses only the solution, the compiler drops it.
    (One solve of ``[rhs | I]`` cannot be dropped: it made a vmapped sweep of 64 ReLU
    students take 30 % more CPU time, ``benchmarks/results/probes.md``.) Its derivative,
    ``d(S⁻¹)ᵢᵢ = −(S⁻¹ dS S⁻¹)ᵢᵢ``, comes from the inverse at hand (no LAPACK call)."""
    return jnp.diagonal(_inverse(system), axis1=-2, axis2=-1)


@_inverse_diagonal.defjvp
def _inverse_diagonal_jvp(primals, tangents):
    (system,), (d_system,) = primals, tangents
    inverse = _inverse(system)
    return (jnp.diagonal(inverse, axis1=-2, axis2=-1),
            -jnp.einsum("...ij,...jk,...ki->...i", inverse, d_system, inverse))


def _least_squares(system, rhs):
    """The minimal-norm least-squares solution ``S⁺ rhs``, the diagonal of the pseudo-inverse
    ``S⁺`` (singular values below `_RANK_TOLERANCE` of the largest dropped) and which pairs it
    leaves neutral: ``(S⁺)ᵢᵢ = 0``, the pair's ż responds to no slope of the system.

    Where sliding constraints are linearly dependent (duplicated examples: identical rows and
    columns; an example x = 0: a zero row and column, its ż identically 0), the system is
    singular but consistent (``Σ cᵢ xᵢ = 0`` gives ``Σ cᵢ żᵢ = 0`` for every slope, so the
    right-hand side has the same dependence), and every solution gives the same field: a null
    vector v changes the direction by ``Jᵀ u`` with ``J_S Jᵀ u = 0``, hence ``Jᵀ u = 0``. The
    minimal-norm one splits a duplicated constraint evenly (inside ``[lo, hi]`` whenever any
    split is) and leaves the slope of an x = 0 pair at the base slope
    ([THEORY §8.2–8.3][theory-8-2])."""
    left, values, right_t = jnp.linalg.svd(system)
    keep = values > _RANK_TOLERANCE * values[..., :1]
    inverse_values = jnp.where(keep, 1.0 / jnp.where(keep, values, 1.0), 0.0)
    u = jnp.einsum("...ki,...k,...jk,...j->...i", right_t, inverse_values, left, rhs)
    diagonal = jnp.einsum("...ki,...k,...ik->...i", right_t, inverse_values, left)
    neutral = jnp.abs(diagonal) <= _RANK_TOLERANCE * jnp.max(inverse_values, axis=-1,
                                                             keepdims=True)
    return u, diagonal, neutral


def _solves(system, rhs, u, *, neutral=None, growth=False):
    """Per system: whether `u` solves ``S u = rhs``: finite, with a residual at most
    `_DEGENERATE_RESIDUAL` of the largest right-hand side (a `neutral` pair's row not
    counted: its ż responds to no slope, its residual is its drift, which the transition
    settles, `AbstractKinkedDynamics._settle`) and, with `growth`, no entry above
    `_DEGENERATE_GROWTH` of it."""
    scale = jnp.max(jnp.abs(rhs)) + jnp.finfo(rhs.dtype).tiny
    residual = jnp.einsum("kij,kj->ki", system, u) - rhs
    if neutral is not None:
        residual = jnp.where(neutral, 0.0, residual)
    ok = (jnp.all(jnp.isfinite(u), axis=-1)
          & (jnp.max(jnp.abs(residual), axis=-1) <= _DEGENERATE_RESIDUAL * scale))
    if growth:
        ok = ok & (jnp.max(jnp.abs(u), axis=-1) <= _DEGENERATE_GROWTH * scale)
    return ok


def _minimal_norm(system, rhs, solved, diagonal=True):
    """`_least_squares` at the cost of an LU factorization where the systems are regular:
    LU first (`_regular`), and the SVD (~3× an LU's cost; 3.7 ms for the 100 systems of
    32 × 32 that a digits transition's `kink_shift` solves, against ~0.1 ms) only where a
    pivot is (nearly) 0 or the LU solution fails `solved` (per system: finite, small
    residual, ...), which may mean a rank deficiency. Where a system is regular the two
    solutions agree (the least-squares solution is the unique solution). The predicate is
    reduced over a vmapped batch, so the branch stays a branch instead of a select that runs
    both. Returns ``(u, diagonal of the (pseudo-)inverse or None, neutral)``.

    Each branch makes its LAPACK calls after the solve (the branch needs ``u``), one after
    the other: none runs beside another (`ibflow._lapack`)."""
    u, small = _regular(system, rhs)

    def least_squares():
        u, inverse_ls, neutral = _least_squares(system, rhs)
        return u, inverse_ls if diagonal else None, neutral

    def regular():
        inverse = _inverse_diagonal(system) if diagonal else None
        return u, inverse, jnp.zeros(u.shape, dtype=bool)

    return jax.lax.cond(eqxi.unvmap_any(jnp.any(small | ~solved(u))), least_squares, regular)


class Packing(eqx.Module):
    """Each neuron's marked examples packed first, in order, into `K` slots: ``index`` (m, K)
    the example in each slot (0 where none), ``mask`` (m, K) the slots in use, ``in_slot``
    (m, K, n) which example each slot holds; ``neuron`` (m, 1) the neurons' indices.

    Each pair's slot is its running count, compared with the slots, and unpacked by a masked
    sum (`unpacked`). Neither a sort (XLA's sort on CPU is slow enough to dominate a digits
    run, where this packing runs at every field evaluation) nor a scatter (XLA on CPU compiles
    each as a while loop, and the multiplier solve is inlined at every site that evaluates the
    field)."""

    index: Int[Array, "m K"]
    mask: Bool[Array, "m K"]
    in_slot: Bool[Array, "m K n"]

    @classmethod
    def of(cls, marked: Bool[Array, "n m"], slots: int) -> "Packing":
        slot = jnp.where(marked, jnp.cumsum(marked, axis=0) - 1, slots)  # (n, m)
        in_slot = slot.T[:, None, :] == jnp.arange(slots)[None, :, None]  # (m, K, n)
        mask = jnp.arange(slots)[None, :] < jnp.sum(marked, axis=0)[:, None]
        # (Each slot holds one example or none: its index is a masked sum, a plain reduction
        # where an argmax is a reduction over (value, index) pairs.)
        index = jnp.sum(jnp.where(in_slot, jnp.arange(marked.shape[0]), 0), axis=-1)
        return cls(index=index, mask=mask, in_slot=in_slot)

    @property
    def neuron(self) -> Int[Array, "m 1"]:
        return jnp.arange(self.index.shape[0])[:, None]

    def unpacked(self, values: Float[Array, "m K"]) -> Float[Array, "n m"]:
        """Per-slot values back to their pairs (0 off the marked set)."""
        return jnp.sum(jnp.where(self.in_slot, values[:, :, None], 0.0), axis=1).T


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
    return response_columns(*jax.linearize(zdot, base), base, index, mask)


def response_columns(
    zdot0: Float[Array, "n m"], linear: Callable[[Float[Array, "n m"]], Float[Array, "n m"]],
    base: Float[Array, "n m"], index: Int[Array, "m K"], mask: Bool[Array, "m K"],
) -> tuple[Float[Array, "n m"], Float[Array, "m K K"]]:
    """`linear_response` from a linearization already at hand (``zdot0`` and the linear map
    of ``jax.linearize(zdot, base)``): the linearization does not depend on the system's size,
    so a multiplier solve computes it once, outside its branches per size."""
    n, m = base.shape
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

    A rank-deficient but consistent system (linearly dependent sliding constraints: duplicated
    examples, an example x = 0) gets its minimal-norm solution (`_least_squares`).

    Returns the slopes, ``ok`` (False when a neuron slides on more than `max_rows` examples or
    a system has no solution: non-finite, large residual or an absurdly large solution) and,
    per sliding pair, its effective stiffness ``∂żᵢ/∂λᵢ`` with the other sliding pairs of its
    neuron re-solved (``1/(M⁺)ᵢᵢ``: a Schur complement where M is regular; for a group of
    duplicated pairs, the group's). A slide is attracting when it is negative: then
    ``λᵢ > hi`` means that even the slope hi pushes ``zᵢ`` up; neutral when 0 (``(M⁺)ᵢᵢ = 0``:
    the pair's ż responds to no slope, as for x = 0, so any slope keeps it at its kink).
    Zero off the sliding set.
    """
    counts = jnp.sum(sliding, axis=0)  # (m,)
    packing = Packing.of(sliding, max_rows)
    index, mask, neuron = packing.index, packing.mask, packing.neuron
    zdot0, matrix = response(index, mask)  # (n, m), (m, K_i, K_l)
    eye = jnp.eye(mask.shape[1], dtype=base.dtype)
    pairs = mask[:, :, None] & mask[:, None, :]
    # Columns scaled to unit size: a column is one example's effect on ż, which shrinks with
    # its loss derivative (a well-classified example's can be 1e-10 of another's late in a
    # classifier's flow). The growth test then asks for contributions ``u`` no absurdly larger
    # than ``ż`` itself, not for slopes below a fixed size: a pair taken into the sliding set
    # tentatively needs a huge slope when its own column is tiny, and that only means it
    # crosses (a fixed bound ended a digits flow from σ = 1e-5 as `degenerate_sliding` short
    # of its limit).
    column = jnp.max(jnp.abs(jnp.where(pairs, matrix, 0.0)), axis=1)  # (m, K_l)
    # A pair whose slope moves no sliding ż (x = 0, a zero residual or output weight: the
    # one-sided fields agree) constrains nothing either: its row and column leave the system,
    # and it is neutral (a drift of its own ż is the transition's to settle).
    null = mask & (column == 0)
    active = mask & ~null
    pairs = active[:, :, None] & active[:, None, :]
    column = jnp.where(active, column, 1.0)
    system = jnp.where(pairs, matrix, eye) / column[:, None, :]
    rhs = jnp.where(active, -zdot0[index, neuron], 0.0)

    def solved(u, neutral=None):
        return _solves(system, rhs, u, neutral=neutral, growth=True)

    if max_rows == 1:
        # One row: a division (see `ibflow._kinks.kinked._system_sizes`). The scaled entry is
        # ±1, or 0 for a pair whose ż responds to no slope (x = 0): its pseudo-inverse is 0.
        entry = system[..., 0]
        neutral = entry == 0
        inverse = jnp.where(neutral, 0.0, 1.0 / jnp.where(neutral, 1.0, entry))
        u = inverse * rhs
    else:
        u, inverse, neutral = _minimal_norm(system, rhs, solved)
    neutral = neutral | null
    delta = u / column
    ok = (jnp.max(counts) <= max_rows) & jnp.all(solved(u, neutral)) & jnp.all(
        jnp.isfinite(delta))
    # (M⁺)ᵢᵢ = (S⁺)ᵢᵢ / columnᵢ for M = S·diag(column); a neutral pair's stiffness is 0.
    inverse_diagonal = jnp.where(neutral, 1.0, inverse / column)
    per_slot = jnp.where(mask & ~neutral, 1.0 / inverse_diagonal, 0.0)

    slopes = base + packing.unpacked(jnp.where(mask, delta, 0.0))
    return slopes, ok, packing.unpacked(per_slot)


def kink_shift(preactivations: Callable, state, held: Bool[Array, "n m"],
               onto: Bool[Array, "n m"], max_rows: int):
    """The least move of `state` (in its own coordinates) that puts the pre-activations
    marked `onto` at 0 and leaves the other `held` ones where they are: one Gauss–Newton step
    on ``z_H(θ) = z_H⁰ ∘ [not onto]``, ``δθ = −J_Hᵀ (J_H J_Hᵀ)⁺ (z_H ∘ [onto])`` (exact where
    ``z`` is linear in the state, as for every two-layer model). Neuron k's
    pre-activations depend only on neuron k's parameters, so ``J_H J_Hᵀ`` splits per neuron
    like the multiplier system (`linear_response` over the held examples, at most
    `max_rows` per neuron; the minimal-norm solution where examples repeat). Returns ``δθ``
    (held constant under differentiation: it is at most an event's tolerance).

    Why: a segment's event is located to ``|z| ≲ 1e-8`` (the root finder's tolerance on the
    scaled event), and a pair that approaches its kink tangentially (its ż vanishing with z,
    as where the flow drives an example's residual to 0 through one neuron) can be taken into
    the sliding set that far from it. Sliding keeps ż = 0, so the offset stays, and the
    output the slope-free value ``σ(z) ≠ 0`` gives disagrees with the mode's slope: ReLU
    student 80 of benchmarks/students.py froze at a loss of 9e-20, its mode's field at
    round-off, and spent its switch budget on round-off events."""
    fixed = jax.lax.stop_gradient(state)
    z, pullback = jax.vjp(preactivations, fixed)
    packing = Packing.of(held, max_rows)

    def gram(v):  # J Jᵀ v
        return jax.jvp(preactivations, (fixed,), pullback(v))[1]

    _, matrix = linear_response(gram, jnp.zeros_like(z), packing.index, packing.mask)
    pairs = packing.mask[:, :, None] & packing.mask[:, None, :]
    system = jnp.where(pairs, matrix, jnp.eye(max_rows, dtype=z.dtype))
    rhs = jnp.where(packing.mask, -jnp.where(onto, z, 0.0)[packing.index, packing.neuron], 0.0)
    mu, _, _ = _minimal_norm(system, rhs, lambda mu: _solves(system, rhs, mu),
                             diagonal=False)
    return pullback(packing.unpacked(jnp.where(packing.mask, mu, 0.0)))[0]
