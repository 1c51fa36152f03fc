"""The tail strategies' one abstract type: the engine asks a tail what it needs (its default path
tolerances and switch level, where the explicit phase stops, whether to watch for stiffness) and
lets it run the last phase; it never asks which tail it holds ([THEORY §8.1][theory-8-1])."""

import abc

import diffrax as dfx
import equinox as eqx
from jaxtyping import Array

from .._segments import Phase


class AbstractTail(eqx.Module):
    """The last, stiff phase of a flow: from the loss level where the explicit phase hands over
    to the target. A strategy passed by value (``integrate(..., stiff_solver=...)``).

    **Methods the engine calls:** `path_defaults` (the explicit phase's default ``rtol``,
    ``atol`` and switch level before this tail), `check` (refuse dynamics or options the tail
    cannot serve, with a ValueError naming the option), `first_stop` (where the explicit phase
    stops), and one of two ways to finish: `segment_solver`, an adaptive Diffrax solver with
    which the engine's segment loop continues after the hand-over (one loop for both phases:
    the hand-over is a segment boundary like a switch), or, where that is None, `run`, the
    phase itself. `watches_stiffness`: whether the explicit phase should also hand over as
    soon as it turns stiff (`StiffnessWatch`). `compacts`: whether members of a vmapped batch
    that finish this tail early stop costing work (`ibflow._batching`), so that a sweep may
    batch many members without their lockstep waste.
    """

    watches_stiffness: eqx.AbstractClassVar[bool]
    compacts: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def path_defaults(self) -> tuple[float, float, float]:
        """The default ``(rtol, atol, stiff_switch)`` of a solve that ends with this tail."""

    @abc.abstractmethod
    def check(self, dynamics, save_at) -> None:
        """Raise ValueError where this tail cannot finish `dynamics` (or fill `save_at`)."""

    @abc.abstractmethod
    def first_stop(self, target_loss: Array, switch_stop: Array, loss_scale: Array) -> Array:
        """The loss level where the explicit phase stops, given the target, the switch level
        ``max(target, stiff_switch · loss_scale)`` and the loss scale."""

    def segment_solver(self) -> dfx.AbstractAdaptiveSolver | None:
        """The solver that continues the engine's segment loop from the hand-over to the
        target (its event, saving and structured root finder are the engine's), or None
        where this tail finishes the flow by its own `run`."""
        return None

    def run(self, dynamics, first: Phase, *, run: Array, stop_at: Array, budget: Array,
            progress) -> Phase:
        """The tail phase from where `first` stopped, where `run` holds, until the loss reaches
        `stop_at` or `budget` more steps are spent; the returned `Phase` counts the solve's
        steps so far (``first.steps`` included). Called only where `segment_solver` is None,
        so a tail overrides one of the two."""
        raise NotImplementedError(
            f"{type(self).__name__} finishes neither by a segment solver nor by a run of its own")
