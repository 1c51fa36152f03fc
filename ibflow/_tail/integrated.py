"""The integrated tail: an implicit Runge–Kutta method follows the path to the target
([THEORY §8.1][theory-8-1])."""

from typing import ClassVar

import diffrax as dfx

from .base import AbstractTail

#: Default path tolerances of the explicit phase before an integrated tail.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-10, 1e-14
#: Default loss level (relative to ``mean(y²)/2``) where the explicit phase hands over to an
#: integrated tail.
DEFAULT_STIFF_SWITCH = 1e-8


class IntegratedTail(AbstractTail):
    """The tail integrated by an adaptive Diffrax `solver` (an implicit one: its stage equations
    use the dynamics' structured Jacobian through `StructuredChord`). It follows the path, so a
    target of one's own (an early stop deep in the stiff tail) and `save_at` are met on it."""

    solver: dfx.AbstractAdaptiveSolver
    watches_stiffness: ClassVar[bool] = True
    compacts: ClassVar[bool] = False  # diffeqsolve runs its batch in lockstep

    def path_defaults(self):
        return DEFAULT_RTOL, DEFAULT_ATOL, DEFAULT_STIFF_SWITCH

    def check(self, dynamics, save_at):
        pass

    def first_stop(self, target_loss, switch_stop, loss_scale):
        return switch_stop

    def segment_solver(self):
        return self.solver
