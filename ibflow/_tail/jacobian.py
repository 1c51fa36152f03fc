"""Structured Jacobians of a flow's vector field, and ``(I − c·F')⁻¹`` without p × p matrices.

An implicit Runge–Kutta stage solves ``z = F(y₀ + c z)``; its Newton/chord iteration needs
``(I − c·F')⁻¹`` (c = step × diagonal coefficient). [THEORY §8.1][theory-8-1]: for the square loss
in the tail, ``F' ≈ −speed · P · (1/n) JᵀJ`` with J the n × p output Jacobian, rank ≤ n. With
``U = speed·P·Jᵀ/n`` (p × n) and ``V = J`` (n × p) the Woodbury identity

    ``(I + c U V)⁻¹ = I − c U (I + c V U)⁻¹ V``

costs one n × n inverse and O(n·p) per application: no p × p matrix is ever formed. The small
matrix is inverted explicitly, once per step: the chord iteration applies it several times per
stage, and a matrix product is one operation where an LU solve is two LAPACK triangular solves
and a permutation, and on a small problem (n of a few, p of tens) those calls cost more than the
rest of the step. The chord needs an approximate inverse only, and ``I − c·F'`` is far from
singular where ``F'`` is minus a positive semi-definite form (gradient flows; mirror flows with
a positive diagonal metric).
"""

import abc

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, PyTree

from .._lapack import after


class AbstractShiftedInverse(eqx.Module):
    """``v ↦ (I − c·F')⁻¹ v`` for one c, factorized once, applied many times."""

    @abc.abstractmethod
    def __call__(self, v: PyTree[Array]) -> PyTree[Array]: ...


class AbstractTailJacobian(eqx.Module):
    """A representation of ``F'`` at one point that can build `AbstractShiftedInverse`s."""

    @abc.abstractmethod
    def factor(self, c: Float[Array, ""]) -> AbstractShiftedInverse:
        """Factorize ``I − c·F'``."""


class _MatrixInverse(AbstractShiftedInverse):
    matrix: Float[Array, "k k"]

    def __call__(self, v):
        flat, unravel = ravel_pytree(v)
        return unravel(self.matrix @ flat)


class DenseJacobian(AbstractTailJacobian):
    """``F'`` as a dense matrix over the state's k entries (a PyTree of float arrays, raveled
    in `jax.flatten_util.ravel_pytree`'s order), for small k: the diagonal net's reduced n-dim
    ODE, whose Jacobian is known in closed form, or a small model's exact Jacobian
    (`DenseJacobian.of`)."""

    matrix: Float[Array, "k k"]

    def factor(self, c):
        k = self.matrix.shape[0]
        return _MatrixInverse(jnp.linalg.inv(jnp.eye(k, dtype=self.matrix.dtype) - c * self.matrix))

    @classmethod
    def of(cls, field, state) -> "DenseJacobian":
        """The exact Jacobian of ``field: state -> velocity`` (same PyTree structure) at
        `state`: k forward-mode products, one per state entry, so for small states only."""
        flat, unravel = ravel_pytree(state)
        return cls(jax.jacfwd(lambda x: ravel_pytree(field(unravel(x)))[0])(flat))


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


class _WoodburyInverse(AbstractShiftedInverse):
    jacobian: "LowRankJacobian"
    c: Float[Array, ""]
    inner: Float[Array, "n n"]  # (I + c V U)⁻¹

    def __call__(self, v):
        z = self.inner @ self.jacobian.apply_v(v)
        correction = self.jacobian.apply_u(z)
        return jax.tree_util.tree_map(lambda a, b: a - self.c * b, v, correction)


class LowRankJacobian(AbstractTailJacobian):
    """``F' ≈ −U V`` with ``V: state → ℝⁿ`` and ``U: ℝⁿ → state`` stored as PyTrees shaped like
    the state with a leading axis of length n (leaf-wise: ``(V s)_i = Σ ⟨V[i], s⟩``,
    ``U z = Σ_i z_i U[i]``). Leaves without structure (e.g. the real time of a warped flow) hold
    zeros: their rows of F' are dropped, which a chord iteration tolerates."""

    U: PyTree[Array]
    V: PyTree[Array]

    def apply_v(self, s):
        return sum(jnp.tensordot(vl, sl, axes=sl.ndim) for vl, sl in zip(_leaves(self.V),
                                                                         _leaves(s)))

    def apply_u(self, z):
        return jax.tree_util.tree_map(lambda ul: jnp.tensordot(z, ul, axes=1), self.U)

    def factor(self, c):
        us, vs = _leaves(self.U), _leaves(self.V)
        n = us[0].shape[0]
        gram = sum(vl.reshape(n, -1) @ ul.reshape(n, -1).T for ul, vl in zip(us, vs))
        return _WoodburyInverse(self, c, jnp.linalg.inv(jnp.eye(n, dtype=gram.dtype) + c * gram))


class _GatedInverse(AbstractShiftedInverse):
    exact: Bool[Array, ""]
    dense: _MatrixInverse
    low_rank: _WoodburyInverse

    def __call__(self, v):
        return jax.lax.cond(self.exact, lambda: self.dense(v), lambda: self.low_rank(v))


class GatedJacobian(AbstractTailJacobian):
    """The exact dense Jacobian of a small state where `exact` is true, else its low-rank
    Gauss–Newton form; one structure (a static type for the chord) whose work is chosen at run
    time. `exact` is reduced over any vmapped batch (`equinox.internal.unvmap_any`) by its
    maker, so that a ``lax.cond`` picks one branch instead of a select running both; the
    exact form serves every member correctly. Where `exact` is false, `dense` holds zeros and
    is never factorized."""

    exact: Bool[Array, ""]
    dense: DenseJacobian
    low_rank: LowRankJacobian

    def factor(self, c):
        k = self.dense.matrix.shape[0]
        n = _leaves(self.low_rank.U)[0].shape[0]
        dtype = self.dense.matrix.dtype

        def dense():
            return self.dense.factor(c), _WoodburyInverse(self.low_rank, c,
                                                          jnp.zeros((n, n), dtype))

        def low_rank():
            return _MatrixInverse(jnp.zeros((k, k), dtype)), self.low_rank.factor(c)

        dense_inverse, low_rank_inverse = jax.lax.cond(self.exact, dense, low_rank)
        return _GatedInverse(self.exact, dense_inverse, low_rank_inverse)


#: Largest state (parameters, plus the real time of a warped flow) whose tail gets the exact
#: dense Jacobian far from the interpolation set (`gated`).
DENSE_TAIL_MAX = 256
#: ... far: a loss above this fraction of the loss at zero outputs (``mean(y²)/2`` for the
#: square loss), the default tail switch, below which the Gauss–Newton form is accurate.
EXACT_TAIL_ABOVE = 1e-8


def gated(low_rank, field, state, loss, scale, live=True) -> "AbstractTailJacobian | None":
    """The tail's Jacobian of a parameter-space flow: the exact dense Jacobian of `field` (state
    → velocity) at `state` while `loss` is above `EXACT_TAIL_ABOVE` · `scale` and the state has
    at most `DENSE_TAIL_MAX` entries, else the Gauss–Newton `low_rank` form
    (`GatedJacobian`: one structure, the work chosen at run time; `low_rank` itself for larger
    states, None where there is none).

    Why: the Gauss–Newton form drops ``Σ rᵢ ∇²fᵢ``, which is not small where stiffness
    detection starts the tail far from the interpolation set (loss ≤ 1e-2·L₀), nor near a
    limit that does not interpolate, and the chord iteration then holds the step to its
    inverse: the width-16 ReLU `ShallowNet` of tests/test_kinks.py (49 parameters) exhausts a
    10⁵-step budget with Gauss–Newton throughout where the exact Jacobian converges in a few
    thousand steps; a tanh student handed to the tail above its spurious minimum
    (tests/test_stationary.py) took 43 119 steps to come to rest. Below the switch level the
    low-rank form is kept: there it is accurate, and a dense k × k factorization in every
    implicit stage would cost time without saving steps.

    `live`: False for a vmapped member that takes no step (done already: `Mode.live`); its
    loss does not choose the batch's form."""
    k = sum(a.size for a in _leaves(state))
    if low_rank is None or k > DENSE_TAIL_MAX:
        return low_rank
    exact = eqxi.unvmap_any(live & (loss > EXACT_TAIL_ABOVE * scale))
    dtype = _leaves(low_rank.U)[0].dtype
    # The dense Jacobian's multiplier solves start once the low-rank form's are done: no two
    # batched LAPACK calls at once (`ibflow._lapack`).
    state = after(low_rank, state)
    dense = jax.lax.cond(exact, lambda: DenseJacobian.of(field, state).matrix,
                         lambda: jnp.zeros((k, k), dtype))
    return GatedJacobian(exact=exact, dense=DenseJacobian(dense), low_rank=low_rank)
