"""A step-size controller wrapper that enforces one step budget over several solves and ends a
solve that stalls (the clock no longer advances), so that a flow that cannot converge says so in
seconds instead of exhausting a 10⁵-step budget."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from .stiffness import StiffnessWatch

#: The stall test: over this many consecutive steps (accepted or rejected) the clock must grow by
#: more than `STALL_ADVANCE` relative (plus `STALL_ADVANCE` absolute). Healthy phases advance
#: geometrically or at least linearly (explicit solvers at their stability limit: h/t ≳ 1e-7,
#: so ≥ 4e-4 per window); chattering at a kink advances ~1e-10 of t per step.
STALL_WINDOW = 4096
STALL_ADVANCE = 1e-6


class _BudgetState(eqx.Module):
    steps: Int[Array, ""]
    mark_steps: Int[Array, ""]
    mark_t: Array
    stalled: Array
    inner: object
    mark_loss: Array  # stiffness watch: the last decade mark (loss, attempted steps)
    mark_loss_steps: Array
    stiff: Array
    proposed_dt: Array  # the controller's proposal for the next step (`first_dt` of a restart)


class BudgetController(dfx.AbstractAdaptiveStepSizeController):
    """Wraps an adaptive controller; ends the solve with ``max_steps_reached`` once `budget`
    steps (accepted + rejected) were attempted, and with ``dt_min_reached`` (read as
    `Status.stalled`) when the clock stalls (see `STALL_WINDOW`). With a `watch`, it also ends
    the solve (``dt_min_reached`` with ``state.stiff`` set) when the explicit phase turns stiff
    (`ibflow._tail.stiffness`); read the flag with ``SaveAt(controller_state=True)``."""

    controller: dfx.AbstractAdaptiveStepSizeController
    budget: Int[Array, ""]
    watch: StiffnessWatch | None = None
    #: the first step (> 0), e.g. the last `proposed_dt` of the solve this one restarts; where
    #: it is 0 (or None), the wrapped controller picks it (Diffrax's initial step selection)
    first_dt: Array | None = None

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def norm(self):
        return self.controller.norm

    def wrap(self, direction):
        return BudgetController(self.controller.wrap(direction), self.budget, self.watch,
                                self.first_dt)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        def start(first):
            return self.controller.init(terms, t0, t1, y0, first, args, func, error_order)

        if self.first_dt is None or dt0 is not None:
            t1, inner = start(dt0)
        else:  # no selection (two field evaluations and a cautious first step) where carried
            t1, inner = jax.lax.cond(self.first_dt > 0, lambda: start(self.first_dt),
                                     lambda: start(None))
        zero = jnp.zeros((), dtype=jnp.int64 if jnp.int64 == jnp.int_ else jnp.int32)
        # Not differentiated (as Diffrax does for a controller state it does not save): the
        # engine saves this state to read `stiff`, and Diffrax refuses tangents into a saved one.
        return t1, jax.lax.stop_gradient(_BudgetState(
            steps=zero, mark_steps=zero, mark_t=jnp.asarray(t0), stalled=jnp.array(False),
            inner=inner, mark_loss=jnp.asarray(jnp.inf), mark_loss_steps=zero,
            stiff=jnp.array(False), proposed_dt=jnp.asarray(t1 - t0)))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order,
                        controller_state):
        keep, next_t0, next_t1, jump, inner, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state.inner)
        steps = controller_state.steps + 1
        window_done = steps - controller_state.mark_steps >= STALL_WINDOW
        mark_t = controller_state.mark_t
        stalled = window_done & (jnp.abs(next_t0 - mark_t)
                                 <= STALL_ADVANCE * (1 + jnp.abs(mark_t)))
        mark_loss, mark_loss_steps, stiff = (
            (controller_state.mark_loss, controller_state.mark_loss_steps, jnp.array(False))
            if self.watch is None else self.watch.update(
                steps, keep, y1_candidate, controller_state.mark_loss,
                controller_state.mark_loss_steps))
        state = _BudgetState(
            steps=steps, mark_steps=jnp.where(window_done, steps, controller_state.mark_steps),
            mark_t=jnp.where(window_done, next_t0, mark_t), stalled=stalled, inner=inner,
            mark_loss=mark_loss, mark_loss_steps=mark_loss_steps, stiff=stiff,
            proposed_dt=next_t1 - next_t0)
        result = dfx.RESULTS.where(stalled | stiff, dfx.RESULTS.dt_min_reached, result)
        result = dfx.RESULTS.where(steps >= self.budget, dfx.RESULTS.max_steps_reached, result)
        return keep, next_t0, next_t1, jump, state, result
