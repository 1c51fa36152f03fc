"""Dynamics whose vector field switches between smooth pieces ([THEORY §8.2][theory-8-2])."""

import abc

from jaxtyping import Array, Float, PyTree

from .._dynamics import AbstractDynamics
from .mode import KinkCounters, Mode


class AbstractSwitchingDynamics(AbstractDynamics):
    """A dynamics whose field is smooth for a fixed discrete *mode* and switches on surfaces.

    The ODE state stays a pytree of float arrays; the mode (activation pattern, sliding set)
    travels in ``diffeqsolve``'s ``args``, so `vector_field(t, state, mode)` is smooth within a
    segment and the adaptive solver never sees the kink. The engine's segment loop
    (`ibflow._segments.run_segments`) integrates segment by segment: each segment stops at the
    first crossing of any of its `event_components`, located on the dense output, and
    `transition` chooses the next mode there.
    """

    @abc.abstractmethod
    def initial_mode(self, state: PyTree[Array]) -> Mode:
        """The mode at the initial state."""

    @abc.abstractmethod
    def event_components(self, t, state: PyTree[Array], mode: Mode
                         ) -> tuple[Float[Array, " K"], Float[Array, ""]]:
        """The event's components, continuous in ``(t, state)``, each positive at the
        segment's start: the segment ends where the first of them crosses 0 (downwards); and
        the norm of the unit-speed field in ``mode`` (the segment loop's stationarity test,
        `ibflow._dynamics.stationarity`)."""

    @abc.abstractmethod
    def transition(self, t, state: PyTree[Array], mode: Mode, *, rtol=None, atol=None
                   ) -> tuple[PyTree[Array], Mode, KinkCounters]:
        """The state to continue from (`state`, or `state` put exactly on the switching
        surfaces it slides on, where the event was located off them), the mode after the event
        at ``(t, state)`` and the counts of what happened (with the minimum of
        `event_components` and the field's norm in ``mode`` at the event); `rtol` and `atol`
        are the solve's tolerances (None: switch only what the event located)."""
