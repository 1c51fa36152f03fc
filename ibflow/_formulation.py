"""How `integrate` turns (model, data, flow, loss) into an ODE: strategies passed by value."""

import abc

import equinox as eqx

from ._dynamics.base import AbstractDynamics
from ._dynamics.parameters import ParameterDynamics
from ._models.base import AbstractReducibleModel


class AbstractFormulation(eqx.Module):
    """Chooses the dynamics (the ODE) for a model, its data, a flow and a loss."""

    @abc.abstractmethod
    def dynamics(self, model, X, y, flow, loss) -> AbstractDynamics: ...


class ParameterSpace(AbstractFormulation):
    """Always integrate the model's trainable parameters (any Equinox module)."""

    def dynamics(self, model, X, y, flow, loss):
        return ParameterDynamics(model, X, y, flow, loss)


class Reduction(AbstractFormulation):
    """The model's closed-form reduction (e.g. the diagonal net's n-dim ODE, THEORY §2.3);
    a ValueError when the model offers none for this flow and loss."""

    def dynamics(self, model, X, y, flow, loss):
        reduced = (model.reduced_dynamics(X, y, flow, loss)
                   if isinstance(model, AbstractReducibleModel) else None)
        if reduced is None:
            raise ValueError(f"{type(model).__name__} offers no reduction for "
                             f"{type(flow).__name__} on {type(loss).__name__}.")
        return reduced


class PreferReduction(AbstractFormulation):
    """The model's reduction where it offers one for this flow and loss, else parameters."""

    def dynamics(self, model, X, y, flow, loss):
        reduced = (model.reduced_dynamics(X, y, flow, loss)
                   if isinstance(model, AbstractReducibleModel) else None)
        return ParameterDynamics(model, X, y, flow, loss) if reduced is None else reduced


#: The deprecated ``method=`` strings and the strategies that replace them.
METHODS = {"auto": PreferReduction(), "parameters": ParameterSpace(), "reduced": Reduction()}
