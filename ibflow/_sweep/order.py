"""Member-ordering strategies of a sweep (lockstep-waste reduction).

In a vmapped adaptive solve every member of a batch pays for the slowest one's steps, so
grouping members of similar cost into the same chunk saves work.
"""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _checks
from .._models.cost import AbstractCostEstimate


class AbstractOrder(eqx.Module):
    """Decides the order in which a sweep's members are chunked."""

    @abc.abstractmethod
    def __call__(self, build: Callable, params: dict[str, np.ndarray],
                 size: int) -> Int[np.ndarray, " m"]:
        """A permutation of the ``m = size`` members, given `build` and the members' `build`
        arguments (one flat array per axis, possibly none)."""


class CostOrder(AbstractOrder):
    """Most expensive first (an honest ETA), by the models' `AbstractCostEstimate` capability
    (e.g. `DiagonalNet.estimated_cost`); models without it keep the grid order."""

    def __call__(self, build, params, size):
        if not params:
            return np.arange(size)
        # One compiled cost program, which answers None for models without the capability
        # (decided while tracing, once per build: no abstract probe per call). Op-by-op
        # evaluation of `build` would compile each of its primitives separately (most of a
        # first call on the Figure 7.1 grid). numpy, not jnp.asarray: that compiles a
        # conversion program per shape.
        with _checks.traced_errors_as_nan():  # no host callback: cacheable across processes
            cost = _costs(build, {k: np.asarray(v) for k, v in params.items()})
        if cost is None:
            return np.arange(size)
        return np.argsort(-np.asarray(cost), kind="stable")


@eqx.filter_jit
def _costs(build: Callable, params: dict) -> Float[Array, " m"] | None:
    """Every member's `estimated_cost`, vmapped over the members' `build` arguments; None where
    the models have no `AbstractCostEstimate`."""
    probe = eqx.filter_eval_shape(build, **{k: v[0] for k, v in params.items()})
    if not isinstance(probe, AbstractCostEstimate):
        return None
    return jax.vmap(lambda p: build(**p).estimated_cost())(params)


class GridOrder(AbstractOrder):
    """The grid's own (C) order; the same as ``order=None``."""

    def __call__(self, build, params, size):
        return np.arange(size)
