"""Locating a switching event: a bracketing secant (Illinois) root finder for Diffrax events.

Each segment of a kinked flow ends at the first root of one scalar event function on the last
step's dense output (`ibflow._segments`). ``optimistix`` offers bisection (one bit per
evaluation: ~45 evaluations to bracket a root to 1e-12, and its full 256 when the loss event's
roundoff keeps ``|value|`` above the tolerance) and Newton/chord methods, which need a
derivative and can fail at the kinks of the event function (a minimum over many
pre-activations). No bracketing secant or Brent method is there, hence this one: the Illinois
variant of regula falsi (Dowell & Jarratt 1971) keeps a bracket, so it is as safe as bisection,
and converges superlinearly (order ≈ 1.44) where the function is smooth; a secant step that would
leave the bracket is replaced by bisection, and one within the tolerance of the better end is
moved that far towards the other (Brent's guard), so the bracket closes from both sides. While
an end sits on a flat part of the function (replaced by a point of the same value) it bisects:
the event is a minimum of many values, and one that stays constant at round-off size until
another crosses it left the secant creeping from that end (100–300 evaluations per root on the
ReLU mixture of ``ibflow reproduce stable-rank``, ~20 at most elsewhere).

It stops like ``optx.Bisection`` (bracket below ``atol + rtol·|t|`` and ``|value| < atol``), and
also when the bracket cannot shrink any more (adjacent floating-point numbers): then with
``nonlinear_max_steps_reached`` at once, where bisection ran out its step budget first.
"""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, Bool, Float, Int

_RESULTS = optx.RESULTS
#: `_State.kept` before the first step, which evaluates the function at the lower end.
_UNSEEN = 2


class _State(eqx.Module):
    lower: Float[Array, ""]
    upper: Float[Array, ""]
    g_lower: Float[Array, ""]  # sign-normalized values: g(lower) ≤ 0 ≤ g(upper)
    g_upper: Float[Array, ""]
    error: Float[Array, ""]  # the value at the last evaluated point
    kept: Int[Array, ""]  # the endpoint kept by the last step: −1 lower, +1 upper, 0 none
    # (`_UNSEEN` before the first step)
    flat: Int[Array, ""]  # the end on a flat part of the function: −1 lower, +1 upper, 0 none


class IllinoisBracket(optx.AbstractRootFinder):
    """A bracketing secant root finder for scalar functions on ``[lower, upper]`` (passed as
    ``options``, as for ``optx.Bisection``).

    **Arguments:** `rtol`, `atol`: as ``optx.Bisection``'s. `flip`: True when the value
    decreases through the root (``fn(lower) > 0 > fn(upper)``), as ``optx.Bisection(flip=True)``.
    """

    rtol: float
    atol: float
    flip: bool = False
    norm: ClassVar = jnp.abs

    def _g(self, value):
        return -value if self.flip else value

    def init(self, fn, y, args, options: dict[str, Any], f_struct, aux_struct, tags):
        lower = jnp.asarray(options["lower"], f_struct.dtype)
        upper = jnp.asarray(options["upper"], f_struct.dtype)
        if jnp.shape(y) != () or f_struct.shape != ():
            raise ValueError("IllinoisBracket finds roots of scalar functions of a scalar.")
        # Nothing is evaluated here: the first step evaluates at `lower` (`_UNSEEN`), so the
        # event function has one call site in the compiled program, not two (it solves the
        # multiplier system, which XLA inlines at every site). The value at `upper` comes
        # from the next step: Diffrax starts the search there (``y0`` = the end of the step
        # that crossed). Until then the secant is undefined and the step bisects.
        nothing = jnp.asarray(jnp.inf, f_struct.dtype)
        return _State(lower=lower, upper=upper, g_lower=-nothing, g_upper=nothing,
                      error=nothing, kept=jnp.array(_UNSEEN), flat=jnp.array(0))

    def step(self, fn, y, args, options, state: _State, tags):
        unseen = state.kept == _UNSEEN
        value, aux = fn(jnp.where(unseen, state.lower, y), args)
        g = self._g(value)
        to_lower = g < 0  # y replaces the lower end (the root lies above it)
        lower = jnp.where(to_lower, y, state.lower)
        upper = jnp.where(to_lower, state.upper, y)
        kept = jnp.where(to_lower, 1, -1)
        # Illinois: an end kept twice in a row has its value halved, so the secant moves it.
        twice = kept == state.kept
        # A flat end (a round-off plateau of the minimum: one value constant until another
        # crosses it; the secant from there moves by a sliver per evaluation): entered where an
        # end is replaced by a point of the same value (to 1e-6 relative) that is also below
        # 1e-6 of the other end's, kept while that end keeps its value, cleared when it takes
        # another. The steps bisect meanwhile, without Illinois halvings (the flat end keeps
        # the value it is compared with).
        replaced = jnp.where(to_lower, -1, 1)
        old = jnp.where(to_lower, state.g_lower, state.g_upper)
        other = jnp.where(to_lower, state.g_upper, state.g_lower)
        same = jnp.isfinite(old) & (jnp.abs(g - old) <= 1e-6 * jnp.abs(old))
        enter = same & (jnp.abs(g) <= 1e-6 * jnp.abs(other))
        flat = jnp.where(enter | (same & (state.flat == replaced)), replaced,
                         jnp.where(state.flat == replaced, 0, state.flat))
        twice = twice & (flat == 0)
        g_lower = jnp.where(to_lower, g, jnp.where(twice, 0.5 * state.g_lower, state.g_lower))
        g_upper = jnp.where(to_lower, jnp.where(twice, 0.5 * state.g_upper, state.g_upper), g)
        width = upper - lower
        secant = lower - g_lower * width / (g_upper - g_lower)
        # Brent's guard: a secant step within the tolerance of the better end is moved to
        # that distance towards the other end, so the next value brackets the root tightly
        # from both sides (regula falsi alone converges from one side only).
        tol = 0.5 * (self.atol + self.rtol * jnp.abs(secant))
        best_is_upper = jnp.abs(g_upper) < jnp.abs(g_lower)
        best = jnp.where(best_is_upper, upper, lower)
        towards = jnp.where(best_is_upper, -tol, tol)
        secant = jnp.where(jnp.abs(secant - best) < tol, best + towards, secant)
        # Bisect where the secant is not strictly inside the bracket (no sign change, a flat
        # or non-finite value, or a bracket narrower than the tolerance) or an end is flat.
        good = (secant > lower) & (secant < upper) & (flat == 0)
        new_y = jnp.where(good, secant, lower + 0.5 * width)
        new_state = _State(lower=lower, upper=upper, g_lower=g_lower, g_upper=g_upper,
                           error=value, kept=kept, flat=flat)
        # The first step only records the value at `lower` and goes on to `y` (``y0``).
        first = _State(lower=state.lower, upper=state.upper, g_lower=g, g_upper=state.g_upper,
                       error=state.error, kept=jnp.array(0), flat=jnp.array(0))
        new_y, new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(unseen, a, b),
                                                  (y, first), (new_y, new_state))
        return new_y, new_state, aux

    def terminate(self, fn, y, args, options, state: _State, tags
                  ) -> tuple[Bool[Array, ""], optx.RESULTS]:
        found = (jnp.abs(state.upper - state.lower) < self.atol + self.rtol * jnp.abs(y)) & (
            jnp.abs(state.error) < self.atol)
        midpoint = state.lower + 0.5 * (state.upper - state.lower)
        collapsed = (jnp.abs(state.kept) == 1) & (
            (midpoint <= state.lower) | (midpoint >= state.upper))
        result = _RESULTS.where(found | ~collapsed, _RESULTS.successful,
                                _RESULTS.nonlinear_max_steps_reached)
        return found | collapsed, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
