"""Parameter-space flow of a piecewise-linear model with event-located activation switches and
Filippov sliding (THEORY §8.2)."""

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .._dynamics.parameters import ParameterDynamics
from .base import AbstractSwitchingDynamics
from .equivalent_control import equivalent_control
from .mode import KinkCounters, Mode

#: A sliding multiplier that lies outside ``[lo, hi]`` by more than this fraction of
#: ``hi − lo`` leaves the sliding set at a transition.
_BOX_TOLERANCE = 1e-12
#: Every event value starts a segment at least this far above 0. It must stay a normal float
#: after the segment loop's event scaling: XLA on CPU flushes subnormals to 0, and an event
#: function that starts at 0 has no down-crossing, so a later switch would be missed.
_OFFSET_FLOOR = 1e-200


def _output_with_slopes(model, inputs):
    """The model's own output ``f(x)``, with the parameter derivative of ``σ(z) → slope·z``.

    The value does not depend on the slopes, even off the kink (``z ≠ 0`` to root-finder
    accuracy), so the residuals do not either and the equivalent-control system is exactly
    affine in the slopes; the slope-dependent term is its own parameter derivative only."""
    x, slopes = inputs
    frozen = jax.tree_util.tree_map(
        lambda a: jax.lax.stop_gradient(a) if eqx.is_inexact_array(a) else a, model)
    return frozen(x) + model.output_with_slopes(x, slopes) - frozen.output_with_slopes(x, slopes)


@eqx.filter_jit
def _traced_once(dynamics, state, positive, sliding):
    """`PiecewiseLinearDynamics.slopes` behind a ``jit`` boundary, so that a program traces it
    (a linearization of a gradient, then the multiplier solve) once per input shape instead of
    once per call site: the vector field of every Runge–Kutta stage, the event function and
    the transitions (17 sites in one leaky-neuron solve). JAX's transformations (vmap, jvp,
    transpose) are cached per traced function as well. Measured on a width-8 ShallowNet under
    mirror flow through its kinks, first call (trace, compile at -O0, run): 13.2 and 12.9 s
    before, 11.0 and 10.5 s after; the kink tests of the suite: ~30% less time."""
    return dynamics._solve_slopes(state, positive, sliding)


class PiecewiseLinearDynamics(ParameterDynamics, AbstractSwitchingDynamics):
    """``dθ/dc = flow.velocity(θ, θ₀, ∇_θ L(θ; σ'), L)`` with the slopes ``σ'`` of every
    (example, neuron) pair fixed by the mode: ``hi``/``lo`` by side, and on sliding pairs the
    equivalent-control multipliers ``λ ∈ [lo, hi]`` that keep ``z = 0`` (THEORY §8.2).

    The parameter-space dynamics (`ParameterDynamics`: same state, real time of warped flows,
    Gauss–Newton tail Jacobian) with the parameter derivative taken at the mode's slopes
    (`_output_with_slopes`), so the adaptive solver never sees a kink and the implicit tail
    keeps its O(n·p) low-rank Jacobian.

    Works for any flow whose velocity keeps neurons separable (gradient, diagonal mirror,
    positive scalar warp): the field stays affine in ``σ'(0)``, and a warp rescales the
    one-sided fields without changing which side they point to.

    **Fields:** those of `ParameterDynamics` (``initial`` an `AbstractPiecewiseLinearModel`),
    and `max_sliding_rows` (static: at most this many examples may slide at once; more is
    reported as degenerate sliding).
    """

    max_sliding_rows: int = eqx.field(static=True)

    # --- the smooth pieces ---------------------------------------------------------------
    def per_example(self, model, args):
        # ``args``: the slopes (n, m) of every pair (`slopes`), or None for the model's own.
        if args is None:
            return super().per_example(model, args)
        return _output_with_slopes, (self.X, args)

    def vector_field(self, c, state, args: Mode):
        return super().vector_field(c, state, self._mode_slopes(state, args))

    def linearization(self, c, state, args: Mode | None):
        # The Gauss–Newton form at the mode's slopes (held fixed: the equivalent control's own
        # dependence on the state is left to the chord iteration). ``args`` is None where the
        # engine only asks for the structure's shape.
        mode = self.initial_mode(state) if args is None else args
        return super().linearization(c, state, self._mode_slopes(state, mode))

    def _mode_slopes(self, state, mode):
        slopes, ok, _ = self.slopes(state, mode.positive, mode.sliding)
        # A singular multiplier system is caught by the event function (value −1), which ends
        # the segment; until then keep the field finite.
        lo, hi = self._bounds()
        return jnp.where(ok, slopes, jnp.where(mode.positive, hi, lo))

    def preactivations(self, state) -> Float[Array, "n m"]:
        return jax.vmap(self.model(state).preactivations)(self.X)

    def _bounds(self):
        lo, hi = self.initial.slope_bounds()
        return jnp.asarray(lo, dtype=float), jnp.asarray(hi, dtype=float)

    def _zdot(self, state, slopes):
        velocity = ParameterDynamics.vector_field(self, jnp.zeros(()), state, slopes)
        return jax.jvp(self.preactivations, (state,), (velocity,))[1]

    def slopes(self, state, positive: Bool[Array, "n m"], sliding: Bool[Array, "n m"]
               ) -> tuple[Float[Array, "n m"], Bool[Array, ""], Float[Array, "n m"]]:
        """The slopes of every pair in this mode, whether the sliding system is regular, and
        the effective stiffness of each sliding pair (see `equivalent_control`)."""
        return _traced_once(self, state, positive, sliding)

    def _solve_slopes(self, state, positive, sliding):
        lo, hi = self._bounds()
        base = jnp.where(sliding, 0.5 * (lo + hi), jnp.where(positive, hi, lo))

        def slide():
            return equivalent_control(lambda s: self._zdot(state, s), base, sliding, hi - lo,
                                      self.max_sliding_rows)

        # The predicate is reduced over any vmapped batch (`unvmap_any`): a batched predicate
        # would turn the cond into a select that solves the multiplier system (K + 1 gradient
        # evaluations) at every field evaluation of every member, sliding or not (measured:
        # a 6-member ShallowNet width-256 batch ran 58 s instead of 2.4 s). With no slide in
        # the batch the system is skipped; a member that does not slide gets `base` from it.
        return jax.lax.cond(eqxi.unvmap_any(jnp.any(sliding)), slide,
                            lambda: (base, jnp.array(True), jnp.zeros_like(base)))

    # --- switching -------------------------------------------------------------------------
    def _pair_values(self, state, positive, sliding):
        """Per pair: ``±z`` (positive on its side) or, if sliding, the distance of its
        multiplier to the nearer bound in units of ``hi − lo``; and the regularity flag."""
        lo, hi = self._bounds()
        z = self.preactivations(state)
        slopes, ok, _ = self.slopes(state, positive, sliding)
        margin = jnp.minimum(slopes - lo, hi - slopes) / (hi - lo)
        return jnp.where(sliding, margin, jnp.where(positive, z, -z)), slopes, ok

    def initial_mode(self, state) -> Mode:
        z = self.preactivations(state)
        positive = z >= 0
        sliding = jnp.zeros_like(positive)
        return self._with_offsets(state, positive, sliding)

    def _with_offsets(self, state, positive, sliding) -> Mode:
        values, _, _ = self._pair_values(state, positive, sliding)
        offset = 2 * jnp.minimum(values, 0.0) - _OFFSET_FLOOR
        # A sliding pair leaves when its multiplier is outside [lo, hi] by the transition's own
        # tolerance, not at round-off: a multiplier that sits at its bound (a neuron dead on
        # one side, the one-sided field tangent to z = 0) would otherwise leave and re-enter
        # the slide every few steps (measured: 2000 switches on a ReLU TwoLayerNet).
        offset = jnp.where(sliding, jnp.minimum(offset, -_BOX_TOLERANCE), offset)
        return Mode(positive=positive, sliding=sliding, offset=offset)

    def event_function(self, t, state, mode: Mode):
        values, _, ok = self._pair_values(state, mode.positive, mode.sliding)
        return jnp.where(ok, jnp.min(values - mode.offset), -1.0)

    def transition(self, t, state, mode: Mode) -> tuple[Mode, KinkCounters]:
        """Handle the pair whose event value reached 0 first.

        A free pair at ``z = 0`` joins the sliding set tentatively; a sliding pair whose
        multiplier reached a bound leaves on that bound's side. Then the multipliers are
        re-solved and, one at a time, the sliding pair furthest outside ``[lo, hi]`` leaves on
        the side its multiplier points to (``λ > hi``: the field with slope hi still pushes
        ``z`` up, so the flow continues on ``z > 0``), until every multiplier is in the box.
        A free pair that leaves this way at once crossed (or touched tangentially); one that
        stays slides (Filippov: the one-sided fields point into the surface from both sides).
        """
        lo, hi = self._bounds()
        values, slopes, ok0 = self._pair_values(state, mode.positive, mode.sliding)
        p = jnp.unravel_index(jnp.argmin(values - mode.offset), values.shape)
        was_sliding = mode.sliding[p]
        leaves_up = (slopes[p] - lo) > (hi - slopes[p])
        sliding = mode.sliding.at[p].set(~was_sliding)
        positive = mode.positive.at[p].set(jnp.where(was_sliding, leaves_up, mode.positive[p]))

        def violation(lam, stiffness, sliding):
            # A repelling slide (stiffness ≥ 0) goes first; then the multiplier furthest out.
            outside = jnp.maximum(lo - lam, lam - hi) / (hi - lo)
            return jnp.where(sliding, jnp.where(stiffness < 0, outside, jnp.inf), -jnp.inf)

        def cond(carry):
            sliding, positive, lam, ok, stiffness, it = carry
            return ok & (jnp.max(violation(lam, stiffness, sliding)) > _BOX_TOLERANCE) & (
                it <= values.size)

        def body(carry):
            sliding, positive, lam, ok, stiffness, it = carry
            v = violation(lam, stiffness, sliding)
            q = jnp.unravel_index(jnp.argmax(v), v.shape)
            # The side the flow leaves to is where ż = stiffness·(bound − λ) points; a
            # repelling pair with λ inside the box keeps the side it arrived from.
            up = jnp.where(stiffness[q] < 0, lam[q] > hi,
                           jnp.where(lam[q] < lo, True,
                                     jnp.where(lam[q] > hi, False, positive[q])))
            sliding = sliding.at[q].set(False)
            positive = positive.at[q].set(up)
            lam, ok, stiffness = self.slopes(state, positive, sliding)
            return sliding, positive, lam, ok, stiffness, it + 1

        lam, ok, stiffness = self.slopes(state, positive, sliding)
        sliding, positive, lam, ok, _, _ = jax.lax.while_loop(
            cond, body, (sliding, positive, lam, ok, stiffness, jnp.array(0)))
        counters = KinkCounters(
            switches=jnp.array(1), slides=jnp.sum(sliding & ~mode.sliding),
            exits=jnp.sum(mode.sliding & ~sliding), degenerate=~(ok & ok0))
        return self._with_offsets(state, positive, sliding), counters
