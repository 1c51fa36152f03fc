"""One LAPACK call at a time: ordering for jaxlib 0.10.2's CPU linear algebra.

jaxlib 0.10.2's CPU LAPACK kernels (Cholesky, LU, triangular solves, SVD, ...) split a large
enough batch of matrices into tasks on XLA's intra-op thread pool and block their thread until
those tasks finish (``jax::ParallelBatchMap``). XLA runs the independent operations of a program
at once on the same pool, so two batched LAPACK calls with no data path between them can each
hold a pool thread while waiting for tasks queued behind the other: on a 2-core machine (a pool
of two threads) the program then hangs at 0 % CPU, for ever. Measured on the project's 2-core
CPU (``benchmarks/results/probes.md``, "LAPACK calls that wait for each other"): two
independent ``jnp.linalg.solve`` of 100 systems of 100 × 100 hang every time, and so did the
multiplier solve's two ``lu_solve`` calls (one for the right-hand side, one for the inverse's
diagonal) on 2 560 systems of 10 × 10 (a vmapped sweep of ReLU students, 256 members × 10
neurons), until they became one call. (Whether a later jaxlib still does this could not be
checked: PyPI here serves nothing newer than 0.10.2.)

ibflow's programs therefore keep their LAPACK calls in sequence: where two are independent by
the mathematics, they are merged into one call (one factorization, one solve of a stacked
right-hand side) or ordered by `after`. ``tests/test_lapack_order.py`` checks the lowered
programs of every kinked model, the sweep and the Newton tail for LAPACK calls that XLA could run
at once.
"""

import equinox as eqx
import jax
from jaxtyping import PyTree


def after(done: PyTree, value: PyTree) -> PyTree:
    """`value`, which the compiled program may use only once every array of `done` is
    computed (``lax.optimization_barrier`` over both): the work that consumes `value` starts
    after the work that produced `done`. Transparent to ``jit``, ``vmap``, ``jvp`` and ``grad``
    (the identity on values)."""
    arrays = [leaf for leaf in jax.tree_util.tree_leaves(done) if eqx.is_array(leaf)]
    dynamic, static = eqx.partition(value, eqx.is_array)
    _, dynamic = jax.lax.optimization_barrier((arrays, dynamic))
    return eqx.combine(dynamic, static)
