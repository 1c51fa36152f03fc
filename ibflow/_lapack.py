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
neurons), until the second moved into a branch that runs after the first. (Whether a later
jaxlib still does this could not be checked: PyPI here serves nothing newer than 0.10.2.)

ibflow's programs therefore keep their LAPACK calls in sequence: where two are independent by
the mathematics, they are merged into one call (one factorization, one solve of a stacked
right-hand side), the second is put in a ``lax.cond`` branch that takes the first's result
(the multiplier solve's inverse diagonal), or it is ordered by `after`.
``tests/test_lapack_order.py`` checks the lowered programs of every kinked model, the sweep and
the Newton tail for LAPACK calls that XLA could run at once, and runs two large batched solves
ordered by `after` (which hang without it).

Why not ``lax.optimization_barrier``: it orders XLA's *optimizations*, not the CPU runtime. The
runtime schedules an operation once the buffers it reads are written, and a barrier's outputs
are its inputs' buffers, so a solve of ``barrier((a, b))[1]`` still starts beside the one that
computes ``a``: with it, the two solves of 100 systems of 100 × 100 hung as before
(``benchmarks/results/probes.md``). `after` makes the value itself depend on `done`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree


def after(done: PyTree, value: PyTree) -> PyTree:
    """`value`, which the compiled program can compute from only once every array of `done`
    is: each array of `value` minus a zero computed from all of `done` (``min(|Σ done|, 0)``,
    a NaN sum counted as 0: +0 whatever `done` holds, which XLA cannot fold, and ``x − (+0)``
    is ``x`` for every float, −0 and NaN included; integers get the same 0, booleans an
    exclusive or with ``0 ≠ 0``). The work that consumes `value` therefore starts after the
    work that produced `done`. Transparent to ``jit``, ``vmap``, ``jvp`` and ``grad`` (the
    identity on values; the zero carries no derivative)."""
    arrays = [leaf for leaf in jax.tree_util.tree_leaves(done) if eqx.is_array(leaf)]
    if not arrays:
        return value
    real = jnp.result_type(float)
    total = sum(jnp.sum(jnp.real(leaf).astype(real)) for leaf in arrays)
    zero = jax.lax.stop_gradient(
        jnp.minimum(jnp.abs(jnp.where(jnp.isnan(total), 0.0, total)), 0.0))

    def tied(leaf):
        if not eqx.is_array(leaf):
            return leaf
        if leaf.dtype == jnp.bool_:
            return leaf ^ (zero != 0)
        return leaf - zero.astype(leaf.dtype)

    return jax.tree_util.tree_map(tied, value)


def is_lapack_call(target: str) -> bool:
    """Whether a custom call's target name is one of jaxlib's CPU LAPACK or BLAS kernels."""
    return "lapack" in target or "blas" in target


#: The most elements (of its largest operand) of a batched LAPACK or BLAS call in a program that
#: runs beside another program (`largest_batched_lapack_call`). jaxlib 0.10.2 splits a batched
#: call across the intra-op thread pool once it is large enough, and two such calls in two
#: programs running at once hang the same way as two in one program; an unbatched call is
#: never split. Measured on the project's 2-core CPU, two threads each running a loop of one
#: batched call (``benchmarks/results/probes.md``, "Chunks at once"): solves of 200 systems of
#: 10 × 10 (20 000 elements), 10 of 32 × 32 (10 240) and 2 of 100 × 100 (20 000), triangular
#: solves of 10 systems of 10 × 10 with 60 right-hand sides (6 000) and one unbatched
#: 200 × 200 solve finished; solves of 320 systems of 10 × 10 (32 000), 40 of 32 × 32 (40 960),
#: 10 of 100 × 100 (100 000), and triangular solves of 10 × 10 with 600 right-hand sides (60 000)
#: or of 10 systems of 60 × 60 (36 000) hung. A quarter of the smallest size that hung.
CONCURRENT_LAPACK_ELEMENTS = 8192


def largest_batched_lapack_call(module) -> int:
    """The most elements of an operand of a batched LAPACK or BLAS call in `module` (a
    StableHLO module, ``jax.stages.Lowered.compiler_ir("stablehlo")``; batched: an operand
    with leading dimensions beyond its matrix's two, of more than one matrix), 0 if it makes
    none. Programs whose batched calls are all at most `CONCURRENT_LAPACK_ELEMENTS` may run
    beside each other."""
    from jax.extend.mlir import ir

    def walk(op):
        largest = 0
        if op.operation.name == "stablehlo.custom_call":
            if is_lapack_call(ir.StringAttr(op.attributes["call_target_name"]).value):
                shapes = [ir.RankedTensorType(operand.type).shape for operand in op.operands]
                if any(int(np.prod(shape[:-2], dtype=np.int64)) > 1 for shape in shapes):
                    largest = max(int(np.prod(shape, dtype=np.int64)) for shape in shapes)
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    largest = max(largest, walk(inner))
        return largest

    return max((walk(op) for op in module.body.operations), default=0)
