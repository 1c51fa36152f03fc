"""Removed: the trace cache kept ``jax.export`` programs across processes, keyed on source-file
modification times and function bytecode. That key misses what a traced program reads at run
time (a module-level constant set from the environment), so a second process could silently
reuse the first one's program and results (issue "Results that cannot be silently wrong",
item 2). JAX's persistent compilation cache (`ibflow._cache`) stays: it is keyed on the lowered
program itself, i.e. on content. `TraceCache` now calls its function directly; it remains only
until ``ibflow/_sweep/executor.py`` calls ``_integrate_batch`` itself, then this file goes.
"""

from collections.abc import Callable


class TraceCache:
    """``fn(*bound, *args)``, traced in this process as any ``jax.jit`` function is."""

    def __init__(self, name: str, fn: Callable, *bound):
        self.name, self.fn, self.bound = name, fn, bound

    def __call__(self, *args):
        return self.fn(*self.bound, *args)
