"""The switching logic shared by every dynamics of a piecewise-linear model (THEORY §8.2):
activation modes, Filippov equivalent control, switch events and transitions. A concrete
dynamics combines `AbstractKinkedDynamics` with a smooth dynamics whose vector field takes the
kink slopes of every (example, neuron) pair as its ``args``: parameter space
(`ibflow._kinks.dynamics.PiecewiseLinearDynamics`) and the two-layer classifier's span
coordinates (`ibflow._kinks.classifier.ClassifierKinkedDynamics`)."""

import abc

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .._tail.jacobian import DenseJacobian, GatedJacobian
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
#: Largest state (parameters, plus the real time of a warped flow) whose tail gets the exact
#: dense Jacobian far from the interpolation set (`AbstractKinkedDynamics.linearization`).
DENSE_TAIL_MAX = 256
#: ... far: a loss above this fraction of the loss at zero outputs (``mean(y²)/2`` for the
#: square loss), the default tail switch, below which the Gauss–Newton form is accurate.
EXACT_TAIL_ABOVE = 1e-8


@eqx.filter_jit
def _traced_once(dynamics, state, positive, sliding):
    """`AbstractKinkedDynamics.slopes` behind a ``jit`` boundary, so that a program traces it
    (a linearization of a gradient, then the multiplier solve) once per input shape instead of
    once per call site: the vector field of every Runge–Kutta stage, the event function and
    the transitions (17 sites in one leaky-neuron solve). JAX's transformations (vmap, jvp,
    transpose) are cached per traced function as well. Measured on a width-8 ShallowNet under
    mirror flow through its kinks, first call (trace, compile at -O0, run): 13.2 and 12.9 s
    before, 11.0 and 10.5 s after; the kink tests of the suite: ~30% less time."""
    return dynamics._solve_slopes(state, positive, sliding)


class AbstractKinkedDynamics(AbstractSwitchingDynamics):
    """A flow of a piecewise-linear model with the slopes ``σ'`` of every (example, neuron) pair
    fixed by the mode: ``hi``/``lo`` by side, and on sliding pairs the equivalent-control
    multipliers ``λ ∈ [lo, hi]`` that keep ``z = 0`` (THEORY §8.2).

    Put it before a smooth dynamics in the bases: `vector_field` and `linearization` call the
    smooth one's (``super()``) with the mode's slopes, shape (n, m), as ``args``, and the smooth
    one's ``unit_speed_field(state, slopes)`` gives the field's *direction* (its velocity at
    unit clock speed). The concrete class says what the pre-activations are. The multipliers
    solve ``ż = 0`` on the direction, not on the field:
    a flow's scalar speed (a time warp, the log-loss clock's ``L/‖∇L‖²``) is positive, so it
    does not move the sliding set, but it may depend on the slopes through the gradient, which
    would make the field, unlike its direction, not affine in them.

    Works for any flow whose direction keeps neurons separable (gradient, diagonal mirror,
    positive scalar warp): the direction is affine in ``σ'(0)`` per neuron.
    """

    # The smooth dynamics supplies ``initial`` (an `AbstractPiecewiseLinearModel`), ``X``,
    # ``y`` and ``loss_fn``.
    #: static: at most this many examples may slide at once; more is reported as degenerate
    max_sliding_rows: eqx.AbstractVar[int]

    @abc.abstractmethod
    def preactivations(self, state) -> Float[Array, "n m"]:
        """``z`` of every (example, neuron) pair at `state`."""

    def vector_field(self, c, state, args: Mode):
        return super().vector_field(c, state, self._mode_slopes(state, args))

    def linearization(self, c, state, args: Mode | None):
        """The smooth dynamics' structured form at the mode's slopes (in parameter space the
        Gauss–Newton form; the slopes held fixed: the equivalent control's own dependence on
        the state is left to the chord iteration), or None where it offers none. A state of at most
        `DENSE_TAIL_MAX` entries gets the exact Jacobian of this mode's field instead (the
        equivalent control's state dependence included) while its loss is above
        `EXACT_TAIL_ABOVE` of the loss at zero outputs (`GatedJacobian`: one structure, the
        work chosen at run time). ``args`` is None where the engine only asks for the
        structure's shape.

        Why: the Gauss–Newton form drops ``Σ rᵢ ∇²fᵢ``, which is not small where stiffness
        detection starts the tail far from the interpolation set (loss ≤ 1e-2·L₀), and the
        chord iteration then holds the step to its inverse. Measured on the width-16 ReLU
        `ShallowNet` of tests/test_kinks.py, seed 1 (49 parameters): Gauss–Newton throughout
        ran 10⁵ steps to `budget_exhausted` at loss 2e-6 (16 s); the exact Jacobian throughout
        converged in 3 112 steps (0.64 s). Below the switch level the low-rank form is kept:
        a dense k × k factorization in every implicit stage cost the leaky neurons of
        benchmarks/kinks.py (tail from 1e-8·L₀ on) 5–15 % of their run time for the same
        steps."""
        mode = self.initial_mode(state) if args is None else args
        low_rank = super().linearization(c, state, self._mode_slopes(state, mode))
        k = sum(a.size for a in jax.tree_util.tree_leaves(state))
        if low_rank is None or k > DENSE_TAIL_MAX:
            return low_rank
        scale = self.loss_fn(jnp.zeros_like(self.y), self.y)
        exact = eqxi.unvmap_any(self.loss(state) > EXACT_TAIL_ABOVE * scale)
        dense = jax.lax.cond(
            exact, lambda: DenseJacobian.of(lambda s: self.vector_field(c, s, mode), state).matrix,
            lambda: jnp.zeros((k, k), self.X.dtype))
        return GatedJacobian(exact=exact, dense=DenseJacobian(dense), low_rank=low_rank)

    def _mode_slopes(self, state, mode):
        slopes, ok, _ = self.slopes(state, mode.positive, mode.sliding)
        # A singular multiplier system is caught by the event function (value −1), which ends
        # the segment; until then keep the field finite.
        lo, hi = self._bounds()
        return jnp.where(ok, slopes, jnp.where(mode.positive, hi, lo))

    def _bounds(self):
        lo, hi = self.initial.slope_bounds()
        return jnp.asarray(lo, dtype=float), jnp.asarray(hi, dtype=float)

    def _span(self):
        """``hi − lo``, or 1 where the slopes coincide (a traced slope γ = 1: no kink, so no
        pair slides; the 1 only keeps divisions by the span finite, gradients included)."""
        lo, hi = self._bounds()
        return jnp.where(hi > lo, hi - lo, 1.0)

    def _zdot(self, state, slopes):
        return jax.jvp(self.preactivations, (state,), (self.unit_speed_field(state, slopes),))[1]

    def slopes(self, state, positive: Bool[Array, "n m"], sliding: Bool[Array, "n m"]
               ) -> tuple[Float[Array, "n m"], Bool[Array, ""], Float[Array, "n m"]]:
        """The slopes of every pair in this mode, whether the sliding system is regular, and
        the effective stiffness of each sliding pair (see `equivalent_control`)."""
        return _traced_once(self, state, positive, sliding)

    def _solve_slopes(self, state, positive, sliding):
        lo, hi = self._bounds()
        base = jnp.where(sliding, 0.5 * (lo + hi), jnp.where(positive, hi, lo))

        def slide():
            return equivalent_control(lambda s: self._zdot(state, s), base, sliding, self._span(),
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
        margin = jnp.minimum(slopes - lo, hi - slopes) / self._span()
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
        # Without a kink (hi = lo: a traced slope γ = 1) a pair at z = 0 just crosses.
        kinked = hi > lo
        sliding = mode.sliding.at[p].set(~was_sliding & kinked)
        positive = mode.positive.at[p].set(jnp.where(
            was_sliding, leaves_up, jnp.where(kinked, mode.positive[p], ~mode.positive[p])))

        def violation(lam, stiffness, sliding):
            # A repelling slide (stiffness ≥ 0) goes first; then the multiplier furthest out.
            outside = jnp.maximum(lo - lam, lam - hi) / self._span()
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
