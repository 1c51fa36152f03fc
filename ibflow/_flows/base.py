"""Abstract flow: the geometry that turns a loss gradient into a velocity."""

import abc

import equinox as eqx
from jaxtyping import Array, Float, PyTree

from .._models.base import AbstractModel


class AbstractFlow(eqx.Module):
    """A flow maps the current model, the initial model and the loss gradient to ``dθ/dt``.

    ``grad`` has the structure of the model's trainable (inexact-array) leaves, as returned by
    ``eqx.filter_grad``; the returned velocity must have the same structure.
    """

    @abc.abstractmethod
    def velocity(
        self, model: AbstractModel, initial: AbstractModel, grad: PyTree[Array],
        loss: Float[Array, ""],
    ) -> PyTree[Array]:
        """``dθ/dt`` at ``model`` (started from ``initial``), given ``∇L`` and ``L``."""
