"""How `integrate` turns (model, data, flow, loss) into an ODE: strategies passed by value."""

import abc

import equinox as eqx
import jax

from ._dynamics.base import AbstractDynamics, AbstractKinkReducible
from ._dynamics.parameters import ParameterDynamics
from ._kinks.dynamics import PiecewiseLinearDynamics
from ._models.base import AbstractReducibleModel
from ._models.piecewise_linear import AbstractPiecewiseLinearModel


class AbstractFormulation(eqx.Module):
    """Chooses the dynamics (the ODE) for a model, its data, a flow and a loss."""

    @abc.abstractmethod
    def dynamics(self, model, X, y, flow, loss) -> AbstractDynamics: ...


def _kinked(model, kinks):
    # Through the class: an Equinox module's bound method is itself a module, built at each
    # access, a Python cost paid on every call of a small kinked solve.
    return kinks and isinstance(model, AbstractPiecewiseLinearModel) and type(model).has_kinks(
        model)


def _parameters(model, X, y, flow, loss, kinks, max_sliding_rows):
    if _kinked(model, kinks):
        # A system's rows: one neuron's examples, or every (example, neuron) pair where the
        # kinks couple across layers.
        rows = X.shape[0]
        if not type(model).separable_kinks(model):
            rows *= jax.eval_shape(model.preactivations, X[0]).shape[0]
        return PiecewiseLinearDynamics(model, X, y, flow, loss,
                                       max_sliding_rows=min(max_sliding_rows, rows))
    return ParameterDynamics(model, X, y, flow, loss)


def _reduction(model, X, y, flow, loss, kinks, max_sliding_rows):
    reduced = (model.reduced_dynamics(X, y, flow, loss)
               if isinstance(model, AbstractReducibleModel) else None)
    if reduced is not None and _kinked(model, kinks) and isinstance(reduced,
                                                                    AbstractKinkReducible):
        return reduced.through_kinks(min(max_sliding_rows, X.shape[0]))
    return reduced


class ParameterSpace(AbstractFormulation):
    """Always integrate the model's trainable parameters (any Equinox module).

    **Fields:**
    - `kinks` (default True): for piecewise-linear models (`AbstractPiecewiseLinearModel`:
      leaky-ReLU neuron, `ShallowNet`, ...), locate every activation switch as an event and
      follow Filippov sliding modes exactly ([THEORY §8.2][theory-8-2], `Solution.kinks` reports
      them). False integrates the model as if it were smooth (autodiff's one-sided slope at 0),
      where
      an adaptive solver chatters on a sliding mode until its budget or stall test stops it.
    - `max_sliding_rows` (default 32): most examples sliding at once on one neuron (each
      neuron's multiplier system has at most this many rows; for a model whose kinks couple
      across layers, a deep `MLP`, the most pairs sliding at once in all); more ends the solve
      with `Status.degenerate_sliding`.
    """

    kinks: bool = eqx.field(static=True, default=True)
    max_sliding_rows: int = eqx.field(static=True, default=32)

    def dynamics(self, model, X, y, flow, loss):
        return _parameters(model, X, y, flow, loss, self.kinks, self.max_sliding_rows)


class Reduction(AbstractFormulation):
    """The model's closed-form reduction (e.g. the diagonal net's n-dim ODE,
    [THEORY §2.3][theory-2-3]); a ValueError when the model offers none for this flow and loss.

    **Fields:** `kinks` (default True) and `max_sliding_rows` as for `ParameterSpace`, for
    reductions of piecewise-linear models that run through their kinks (the two-layer
    classifier's span coordinates)."""

    kinks: bool = eqx.field(static=True, default=True)
    max_sliding_rows: int = eqx.field(static=True, default=32)

    def dynamics(self, model, X, y, flow, loss):
        reduced = _reduction(model, X, y, flow, loss, self.kinks, self.max_sliding_rows)
        if reduced is None:
            raise ValueError(f"{type(model).__name__} offers no reduction for "
                             f"{type(flow).__name__} on {type(loss).__name__}.")
        return reduced


class PreferReduction(AbstractFormulation):
    """The model's reduction where it offers one for this flow and loss, else parameters
    (`ParameterSpace`, with its fields)."""

    kinks: bool = eqx.field(static=True, default=True)
    max_sliding_rows: int = eqx.field(static=True, default=32)

    def dynamics(self, model, X, y, flow, loss):
        reduced = _reduction(model, X, y, flow, loss, self.kinks, self.max_sliding_rows)
        if reduced is None:
            return _parameters(model, X, y, flow, loss, self.kinks, self.max_sliding_rows)
        return reduced
