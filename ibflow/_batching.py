"""A while loop whose vmapped members do not wait for each other.

Under `jax.vmap`, ``lax.while_loop`` runs every member until the slowest is done: a member that
has finished still pays for its slot in each later iteration (its update is computed and thrown
away by a select). Where one iteration is costly (a damped Newton step builds and factorizes an
n × n matrix per member) and iteration counts differ (3 on average, up to 11, across the
Figure 7.1 grid), that lockstep doubles the batch's work.

`compacting_while_loop` is ``lax.while_loop`` for one member. Under ``vmap`` (a
`jax.custom_batching.custom_vmap` rule) the batch runs together while more than half of its
members are still running (`SHRINK`); then those members are gathered into a batch of half the
size, which runs on (and compacts again while the half has at least `MIN_BATCH` members), and
the results are scattered back. Every member takes exactly the iterations it takes alone; its
values are the plain loop's up to the round-off of batch-size-dependent kernels (a matrix
product may be blocked differently for 100 members than for 25). Each level compiles one more
copy of the loop body: three for a batch of 100 (100, 50, 25), four for 2 048 (down to 256,
`MAX_COMPACTIONS`).

Why not the sweep's two passes (`ibflow._sweep.executor`): those restart a straggler from the
start, which costs a whole solve; here it continues from where it is.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

#: A batch compacts to a half of its size once no more than that many members run. (A quarter
#: compiles one level fewer, but on the Figure 7.1 grid its first level runs 4 iterations of all
#: 100 members where half runs 2 of 100 and 2 of 50: 450 member iterations against 350, for 296
#: needed. Default sweep, 2-core CPU, one process back to back: 190 → 144 ms.)
SHRINK = 2
#: A batch does not compact into one smaller than this: it runs in lockstep to the end (each
#: level compiles one more copy of the loop body, and a small batch saves little).
MIN_BATCH = 16
#: At most this many compactions (each compiles one more copy of the loop body): after them the
#: batch runs in lockstep to the end. Halving from 2 048 stops at 256 members; quartering
#: reached 32 with as many copies.
MAX_COMPACTIONS = 3


def compacting_while_loop(cond: Callable[[Any, Any], Any], body: Callable[[Any, Any], Any],
                          init: Any, operands: Any) -> Any:
    """``lax.while_loop(lambda s: cond(operands, s), lambda s: body(operands, s), init)``, with
    batched members compacted under ``vmap`` (module docstring). `operands`: what `cond` and
    `body` read besides the state (a pytree; its arrays may be batched or not). Not
    reverse-differentiable (as ``lax.while_loop``): run it on stopped gradients."""
    arrays, static = eqx.partition(operands, eqx.is_array)

    def plain(arrays, state):
        ops = eqx.combine(arrays, static)
        return jax.lax.while_loop(lambda s: cond(ops, s), lambda s: body(ops, s), state)

    run = custom_vmap(plain)

    @run.def_vmap
    def _rule(axis_size, in_batched, arrays, state):
        arrays_batched, state_batched = in_batched
        state = jax.tree_util.tree_map(
            lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
            state, state_batched)
        out = _compacted(cond, body, static, arrays_batched, arrays, state, axis_size,
                         MAX_COMPACTIONS)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run(arrays, init)


def _compacted(cond, body, static, batched, arrays, state, size, compactions):
    """Run the batch `state` (every leaf batched, `size` members) to the end: in lockstep while
    more than ``size / SHRINK`` members run, then the rest as a smaller batch (recursively, at
    most `compactions` more times). `batched`: which leaves of `arrays` carry the member
    axis."""
    axes = jax.tree_util.tree_map(lambda b: 0 if b else None, batched)

    def vmapped(fn):
        return jax.vmap(lambda a, s: fn(eqx.combine(a, static), s), in_axes=(axes, 0))

    small = -(-size // SHRINK)
    if small < MIN_BATCH or compactions == 0:
        return vmapped(lambda ops, s: jax.lax.while_loop(lambda t: cond(ops, t),
                                                         lambda t: body(ops, t), s))(
            arrays, state)

    def running(state):
        return vmapped(cond)(arrays, state)

    def many(state):
        return jnp.sum(running(state)) > small

    def one_step(state):
        active = running(state)
        stepped = vmapped(body)(arrays, state)
        return jax.tree_util.tree_map(
            lambda new, old: jnp.where(jnp.reshape(active, (size,) + (1,) * (new.ndim - 1)),
                                       new, old), stepped, state)

    state = jax.lax.while_loop(many, one_step, state)
    # At most `small` members still run: gather them (running members first), finish them as a
    # smaller batch, scatter them back.
    index = jnp.argsort(~running(state), stable=True)[:small]
    take = jax.tree_util.tree_map(lambda x, b: x[index] if b else x, arrays, batched)
    rest = _compacted(cond, body, static, batched, take,
                      jax.tree_util.tree_map(lambda x: x[index], state), small, compactions - 1)
    return jax.tree_util.tree_map(lambda x, r: x.at[index].set(r), state, rest)
