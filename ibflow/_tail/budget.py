"""A step-size controller wrapper that enforces one step budget over several solves and ends a
solve that stalls (the clock no longer advances), so that a flow that cannot converge says so in
seconds instead of exhausting a 10⁵-step budget."""

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Int

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


class BudgetController(dfx.AbstractAdaptiveStepSizeController):
    """Wraps an adaptive controller; ends the solve with ``max_steps_reached`` once `budget`
    steps (accepted + rejected) were attempted, and with ``dt_min_reached`` (read as
    `Status.stalled`) when the clock stalls (see `STALL_WINDOW`)."""

    controller: dfx.AbstractAdaptiveStepSizeController
    budget: Int[Array, ""]

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
        return BudgetController(self.controller.wrap(direction), self.budget)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        t1, inner = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        zero = jnp.zeros((), dtype=jnp.int64 if jnp.int64 == jnp.int_ else jnp.int32)
        return t1, _BudgetState(steps=zero, mark_steps=zero, mark_t=jnp.asarray(t0),
                                stalled=jnp.array(False), inner=inner)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order,
                        controller_state):
        keep, next_t0, next_t1, jump, inner, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state.inner)
        steps = controller_state.steps + 1
        window_done = steps - controller_state.mark_steps >= STALL_WINDOW
        mark_t = controller_state.mark_t
        stalled = window_done & (jnp.abs(next_t0 - mark_t)
                                 <= STALL_ADVANCE * (1 + jnp.abs(mark_t)))
        state = _BudgetState(
            steps=steps, mark_steps=jnp.where(window_done, steps, controller_state.mark_steps),
            mark_t=jnp.where(window_done, next_t0, mark_t), stalled=stalled, inner=inner)
        result = dfx.RESULTS.where(stalled, dfx.RESULTS.dt_min_reached, result)
        result = dfx.RESULTS.where(steps >= self.budget, dfx.RESULTS.max_steps_reached, result)
        return keep, next_t0, next_t1, jump, state, result
