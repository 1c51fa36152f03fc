"""The cost-estimate capability: a model that can predict how expensive its flow will be."""

import abc

import equinox as eqx
from jaxtyping import Array, Float


class AbstractCostEstimate(eqx.Module):
    """A model offering a cheap, traceable predictor of its flow's step count.

    Generic code (a sweep's `CostOrder`) asks for this capability instead of special-casing a
    concrete model: only the *order* of the estimates matters (larger = more solver steps)."""

    @abc.abstractmethod
    def estimated_cost(self) -> Float[Array, ""]:
        """A scalar that grows with the number of solver steps the flow from ``self`` needs."""
