"""Abstract dynamics: what the engine (``ibflow._engine.solve``) integrates."""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from .._tail.jacobian import AbstractTailJacobian


class AbstractDynamics(eqx.Module):
    """An ODE ``d state/dc = vector_field(c, state, args)`` in a clock c, with the map back to a
    model and the loss that decides convergence.

    The state is a PyTree of float arrays. ``args`` carries discrete modes (e.g. activation
    patterns of kinked models) and is None for smooth dynamics. Concrete dynamics: the generic
    one in parameter space (`ParameterDynamics`) and the closed-form reductions that models
    offer (`DiagonalReducedDynamics`, the classifier's span coordinates).
    """

    @abc.abstractmethod
    def initial_state(self) -> PyTree[Array]:
        """The state at c = 0."""

    @abc.abstractmethod
    def vector_field(self, c, state, args) -> PyTree[Array]:
        """``d state / dc``."""

    @abc.abstractmethod
    def model(self, state) -> eqx.Module:
        """The model at ``state``."""

    @abc.abstractmethod
    def loss(self, state) -> Float[Array, ""]:
        """The training loss at ``state``."""

    @abc.abstractmethod
    def data_loss(self, model) -> Float[Array, ""]:
        """The loss of a model on the dynamics' data: the engine's final, independent check of
        the model it returns (a reduction's own loss may use another, better-conditioned form)."""

    @abc.abstractmethod
    def time(self, c, state) -> Float[Array, ""]:
        """The real gradient-flow time at clock ``c`` (``c`` itself for unwarped flows)."""

    @abc.abstractmethod
    def linearization(self, c, state, args) -> AbstractTailJacobian | None:
        """The vector field's Jacobian at ``state`` in a structured form for the implicit tail
        (dense n × n, or low rank ``−U V`` with V = ∂outputs/∂θ, [THEORY §8.1][theory-8-1]), or None
        when the dynamics offers none (the tail then differentiates the vector field itself)."""


class AbstractStationaryEndDynamics(AbstractDynamics):
    """Capability: a dynamics whose flow may stop at a stationary point above the target (a
    spurious minimum or a saddle: [THEORY §8.3][theory-8-3]); the engine tests its field for
    stationarity. Smooth parameter-space flows offer it; closed-form reductions (gradient flows
    of convex functions) and switching dynamics (Clarke stationarity) do not."""

    @abc.abstractmethod
    def unit_speed_field(self, state, args) -> PyTree[Array]:
        """The field at unit clock speed (its direction; the flow's speed only rescales it)."""


class AbstractConvexGradientDynamics(AbstractDynamics):
    """A capability: the state is a vector, the vector field is the negative gradient (times a
    positive constant) of a strictly convex function, and `linearization` returns its dense
    Jacobian (`DenseJacobian`). The flow then converges from every state to the one root of the
    vector field, so its tail can be finished by Newton's method (`EquilibriumNewton`) instead of
    being integrated. Example: the diagonal net's n-dim reduction ([THEORY §2.3][theory-2-3])."""

    def loss_and_field(self, state) -> tuple[Float[Array, ""], Float[Array, " n"]]:
        """``(loss(state), vector_field(0, state, None))``. Newton's tail needs both at every
        trial point; a dynamics whose two share their expensive part (the diagonal net's
        residual ``Xw(ν) − y``) overrides this to compute it once."""
        return self.loss(state), self.vector_field(jnp.zeros(()), state, None)

    def newton_table(self) -> PyTree[Array] | None:
        """Data that every `newton_matrix` of one Newton solve can share, computed once before
        its loop from the dynamics alone (the diagonal net: products of X's row pairs), or
        None. Default: None."""
        return None

    def newton_matrix(self, state, table=None) -> Float[Array, "n n"]:
        """``−∂F/∂state`` (F the vector field): symmetric positive semi-definite, the matrix
        that Newton's tail factorizes; `table` is `newton_table`'s value (None: build without
        it). Default: from `linearization`."""
        del table
        return -self.linearization(jnp.zeros(()), state, None).matrix


class AbstractKinkReducible(AbstractDynamics):
    """A capability: the reduction of a piecewise-linear model that can also run through its
    kinks (event-located switches and Filippov sliding, [THEORY §8.2][theory-8-2]). Example: the
    two-layer classifier's span coordinates."""

    @abc.abstractmethod
    def through_kinks(self, max_sliding_rows: int) -> AbstractDynamics:
        """The same reduction as a switching dynamics (`ibflow._kinks.AbstractKinkedDynamics`)."""
