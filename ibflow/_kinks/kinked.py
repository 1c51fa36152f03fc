"""The switching logic shared by every dynamics of a piecewise-linear model
([THEORY §8.2][theory-8-2]): activation modes, Filippov equivalent control, switch events and
transitions. A concrete dynamics combines `AbstractKinkedDynamics` with a smooth dynamics whose
vector field takes the
kink slopes of every (example, neuron) pair as its ``args``: parameter space
(`ibflow._kinks.dynamics.PiecewiseLinearDynamics`) and the two-layer classifier's span
coordinates (`ibflow._kinks.classifier.ClassifierKinkedDynamics`)."""

import abc

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PyTree

from .._tail.jacobian import gated
from .base import AbstractSwitchingDynamics
from .equivalent_control import equivalent_control, kink_shift, response_columns
from .mode import KinkCounters, Mode

#: A sliding multiplier that lies outside ``[lo, hi]`` by more than this fraction of
#: ``hi − lo`` leaves the sliding set at a transition.
_BOX_TOLERANCE = 1e-12
#: Every event value starts a segment at least this far above 0. It must stay a normal float
#: after the segment loop's event scaling: XLA on CPU flushes subnormals to 0, and an event
#: function that starts at 0 has no down-crossing, so a later switch would be missed.
_OFFSET_FLOOR = 1e-200
#: A sliding pair whose |z| exceeds this fraction of the largest |z| (round-off), but not
#: `_LOCATED`, is put on its kink at a transition (`kink_shift`).
_ON_KINK = 1e-12
#: The most rounds of `AbstractKinkedDynamics._onto_kinks`: each holds the free pairs the
#: previous round's shift carried across their kinks.
_HOLD_ROUNDS = 3
#: The most a pair's |z| may be off its kink where a segment's event locates it: the root
#: finder's tolerance on the event value (`ibflow._segments`, ``atol / _EVENT_SCALE``). A
#: sliding pair further off came in by the segment loop's round-off rule (a root finder that
#: could not meet its tolerance; `_ROUNDOFF_EVENT`); putting it on its kink would move the
#: state by more than an event's error (ReLU student 67, 7.9e-4 off at a loss of 4e-24, then
#: stalled at 9e-8), so it stays where it is.
_LOCATED = 1e-8
#: A neutral sliding pair whose ż exceeds this fraction of the largest |ż| leaves its kink.
_NEUTRAL_DRIFT = 1e-6
#: Newton iterations on a coupled multiplier system (a deep network's: multi-affine in the
#: slopes, `AbstractKinkedDynamics._newton`); a solution counts as converged where its last
#: step is at most `_COUPLED_STEP` (in units of ``hi − lo``; quadratic convergence: the error
#: left is about its square) or its ż on the sliding pairs at most `_COUPLED_RESIDUAL` of ż at
#: the box's middle.
_COUPLED_ROUNDS = 6
_COUPLED_STEP = 1e-6
_COUPLED_RESIDUAL = 1e-3
#: Newton's rounds go on while each leaves ż on the sliding pairs below this fraction of the
#: previous round's (round-off stops the quadratic decrease).
_COUPLED_CONTRACTION = 0.5
#: The first Newton step is the answer where it leaves ż on the sliding pairs below this
#: fraction of the start's (an affine system: no example slides in two layers).
_AFFINE_RESIDUAL = 1e-9
#: The most a transition's early switches of imminent pairs may move the state, in the error
#: norm of an accepted step (`AbstractKinkedDynamics._imminent`).
CLUSTER_ERROR = 0.5


@eqx.filter_jit
def _traced_once(dynamics, state, positive, sliding, drive=None, at=None):
    """`AbstractKinkedDynamics.slopes` behind a ``jit`` boundary, so that a program traces it
    (a linearization of a gradient, then the multiplier solve) once per input shape instead of
    once per call site: the vector field of every Runge–Kutta stage, the event function and
    the transitions (17 sites in one leaky-neuron solve). JAX's transformations (vmap, jvp,
    transpose) are cached per traced function as well, so a kinked flow's first call (trace
    and compile) does the multiplier solve's share once instead of at every site. With a
    `drive`, the multipliers of the tail Jacobian's projection (`_on_sliding_set`), which
    Diffrax traces at every implicit stage and in each of its shape passes."""
    return dynamics._solve_slopes(state, positive, sliding, drive, at)


def _sorted_nonnegative(values: Array) -> Array:
    """``jnp.sort`` of values ≥ 0 (``+inf`` and NaN allowed), sorted as their int64 bit
    patterns, which order as the values do there (IEEE 754: sign bit clear, exponent above
    mantissa; NaN after ``+inf``, as ``jnp.sort`` puts it). XLA on CPU sorts integers with a
    plain comparison and floats with a total-order comparator: 0.2 ms against 1.4 ms for the
    5 000 pairs of a digits transition (`_imminent`), which sorts at every transition."""
    bits = jax.lax.bitcast_convert_type(values.astype(jnp.float64), jnp.int64)
    return jax.lax.bitcast_convert_type(jnp.sort(bits), jnp.float64).astype(values.dtype)


def _system_sizes(max_rows: int) -> tuple[int, ...]:
    """The static sizes of the per-neuron multiplier systems, one compiled branch each: 1 and
    `max_rows` up to 16; above, 1, 4, 16 and `max_rows` (the middle sizes keep a flow whose
    neurons have a few sliding pairs each off the full `max_rows` system). The
    one-row system, the common case (one pair sliding per neuron), is a division, with a
    one-column response: LAPACK calls cost more than the rest of a small system together, so
    a division, and a response of one column instead of `max_rows`, make the common field
    evaluation several times cheaper. Each branch costs compile time, which is why there are
    few sizes. (Timings: benchmarks/results/kinks.md.)"""
    if max_rows <= 16:
        return (1, max_rows) if max_rows > 1 else (1,)
    return (1, 4, 16, max_rows)


class AbstractKinkedDynamics(AbstractSwitchingDynamics):
    """A flow of a piecewise-linear model with the slopes ``σ'`` of every (example, neuron) pair
    fixed by the mode: ``hi``/``lo`` by side, and on sliding pairs the equivalent-control
    multipliers ``λ ∈ [lo, hi]`` that keep ``z = 0`` ([THEORY §8.2][theory-8-2]).

    Put it before a smooth dynamics in the bases: `vector_field` and `linearization` call the
    smooth one's (``super()``) with the mode's slopes, shape (n, m), as ``args``, and the smooth
    one's ``unit_speed_field(state, slopes)`` gives the field's *direction* (its velocity at
    unit clock speed). The concrete class says what the pre-activations are. The multipliers
    solve ``ż = 0`` on the direction, not on the field:
    a flow's scalar speed (a time warp, the log-loss clock's ``L/‖∇L‖²``) is positive, so it
    does not move the sliding set, but it may depend on the slopes through the gradient, which
    would make the field, unlike its direction, not affine in them.

    Works for any flow whose direction keeps neurons separable (gradient, diagonal mirror,
    positive scalar warp): the direction is affine in ``σ'(0)`` per neuron. Where the model's
    kinks couple across layers (`AbstractPiecewiseLinearModel.separable_kinks` False: a deep
    MLP), all sliding pairs form one system (`_grouped`), multi-affine in the slopes, solved
    by Newton's method.
    """

    # The smooth dynamics supplies ``initial`` (an `AbstractPiecewiseLinearModel`), ``X``,
    # ``y`` and ``loss_fn``.
    #: static: at most this many examples may slide at once on one neuron (on a model whose
    #: kinks couple, this many pairs in all); more is reported as degenerate sliding.
    max_sliding_rows: eqx.AbstractVar[int]

    @abc.abstractmethod
    def preactivations(self, state) -> Float[Array, "n m"]:
        """``z`` of every (example, neuron) pair at `state`."""

    def _separable(self) -> bool:
        """Whether the multiplier system splits per neuron (static)."""
        return type(self.initial).separable_kinks(self.initial)

    def _grouped(self, pairs: Float[Array, "n m"]) -> Float[Array, "N G"]:
        """Per-pair values in the multiplier systems' layout: one column per independent
        system, its rows the pairs that may enter it. Separable: the pairs as they are (a
        system per neuron over its examples); coupled: one column of all n·m pairs."""
        return pairs if self._separable() else pairs.reshape(-1, 1)

    def vector_field(self, c, state, args: Mode):
        return super().vector_field(c, state, self._mode_slopes(state, args))

    def linearization(self, c, state, args: Mode | None):
        """The smooth dynamics' Gauss–Newton form at the mode's slopes (the slopes held fixed:
        the equivalent control's own dependence on the state is left to the chord iteration),
        or None where it offers none; for a small state far from the interpolation set, the
        exact Jacobian of this mode's field instead, the equivalent control's state dependence
        included (`ibflow._tail.jacobian.gated`: without that dependence a sliding ReLU
        `ShallowNet` of tests/test_kinks.py exhausts its budget, and a ReLU student of
        tests/test_stationary_kinks.py takes 12 727 steps instead of < 5 000). ``args``
        None: at the initial mode of `state`."""
        mode = self.initial_mode(state) if args is None else args
        slopes = self._mode_slopes(state, mode)
        low_rank = self.gauss_newton(c, state, slopes)
        if low_rank is not None and args is not None:  # (its shape is the unprojected one's)
            low_rank = self._on_sliding_set(state, mode, low_rank, slopes)
        return gated(low_rank, lambda s: self.vector_field(c, s, mode), state, self.loss(state),
                     self.loss_fn(jnp.zeros_like(self.y), self.y), live=mode.live)

    def _on_sliding_set(self, state, mode, low_rank, slopes):
        """The Gauss–Newton form ``−U V`` with U projected by the equivalent control,
        ``U ← Π U``, ``Π = I − B (P B)⁻¹ P`` (P: the sliding pairs' ż of a direction, B: the
        direction's response to their slopes; per neuron, as the multipliers). The field keeps
        ``P F = 0`` at every state, so its exact Jacobian satisfies ``P F' = 0`` and equals
        ``Π ∂F/∂θ|λ``; the slopes-held-fixed form lacks the ``B ∂λ/∂θ`` term, and a chord
        iteration with it moves the stages off ``ż = 0`` by its tolerance at every implicit
        step: sliding pre-activations drifted to ~5e-12 over the tail of a ReLU student, whose
        example with ``y = 0`` then kept a residual ``Σ aⱼ zⱼ ≈ 1e-11`` (a loss floor 6× the
        target). With ``P Π = 0``, ``P (I − c Π F')⁻¹ = P``: chord corrections keep ż = 0."""
        # B at the mode's multipliers (`slopes`, solved once by `linearization`): the base
        # slopes where the direction is affine in them (separable), the solved ones where it is
        # multi-affine (coupled).
        at = self._base_slopes(mode.positive, mode.sliding) if self._separable() else slopes
        _, along = jax.linearize(lambda s: self.unit_speed_field(state, s), at)

        def project(u):
            drive = self._zdot(state, at, u)
            slopes, ok, _ = _traced_once(self, state, mode.positive, mode.sliding, drive, at)
            return jnp.where(ok, u + along(jnp.where(mode.sliding, slopes - at, 0.0)), u)

        U = jax.lax.cond(eqxi.unvmap_any(jnp.any(mode.sliding)),
                         lambda: jax.vmap(project)(low_rank.U), lambda: low_rank.U)
        return eqx.tree_at(lambda j: j.U, low_rank, U)

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

    def _zdot(self, state, slopes, direction=None):
        """The pre-activations' velocity on `direction` (default: the field's direction at
        `slopes`). In a deep model a later layer's ż holds ``σ'(z)·ż`` of the pairs before it,
        with autodiff's σ' at a sliding pair's z ≈ 0: its ż is 0 at the multipliers, so the
        slope there does not matter (taking the multiplier instead gives the same roots but a
        more nonlinear system, on which Newton failed more often: of 16 random depth-3
        students, 5 ended degenerate or stalled against 2, before `_newton`'s residual
        test)."""
        direction = self.unit_speed_field(state, slopes) if direction is None else direction
        return jax.jvp(self.preactivations, (state,), (direction,))[1]

    def slope_linearization(self, state, base):
        """What `slope_response` needs of the field at the slopes `base`, whatever the
        system's size: a multiplier solve computes it once, outside its branches per size
        (each branch is a copy in the compiled program, and the solve itself is inlined at
        every site that evaluates the field: benchmarks/results/compile_ops.md). Default: ż at
        `base` and its linearization in the slopes."""
        return jax.linearize(lambda s: self._zdot(state, s), base)

    def slope_response(self, state, base, index, mask, linearization):
        """The pre-activations' velocity on the field's direction at the slopes `base`, and
        each neuron's matrix ``∂żᵢⱼ/∂λₗⱼ`` over its examples `index`, from
        `slope_linearization`'s value (see `linear_response`, which this default uses: K
        linearized evaluations of the field; a dynamics that knows its structure overrides
        both with the closed form)."""
        return response_columns(*linearization, base, index, mask)

    def slopes(self, state, positive: Bool[Array, "n m"], sliding: Bool[Array, "n m"]
               ) -> tuple[Float[Array, "n m"], Bool[Array, ""], Float[Array, "n m"]]:
        """The slopes of every pair in this mode, whether the sliding system is regular, and
        the effective stiffness of each sliding pair (see `equivalent_control`)."""
        return _traced_once(self, state, positive, sliding)

    def _base_slopes(self, positive, sliding):
        """Each pair's slope on its side, and the box's middle for a sliding pair (the point
        the multiplier system is linearized at)."""
        lo, hi = self._bounds()
        return jnp.where(sliding, 0.5 * (lo + hi), jnp.where(positive, hi, lo))

    def _linearization(self, state, at):
        """ż at the slopes `at` and its linearization in them, as `_response` takes it:
        `slope_linearization` where the systems split per neuron; in the systems' layout
        (`_grouped`: one column of all pairs) where they couple."""
        if self._separable():
            return self.slope_linearization(state, at)
        return jax.linearize(lambda s: self._grouped(self._zdot(state, s.reshape(at.shape))),
                             self._grouped(at))

    def _response(self, state, at, drive=None, linearization=None):
        """`equivalent_control`'s `response` in the systems' layout (`_grouped`): ż at the
        slopes `at` (or `drive` in its place) and each system's matrix ``∂ż/∂λ`` there, from
        `_linearization`'s value at `at` (computed here if not given)."""
        if linearization is None:
            linearization = self._linearization(state, at)
        if self._separable():
            def response(index, mask):
                zdot0, matrix = self.slope_response(state, at, index, mask, linearization)
                return (zdot0 if drive is None else drive), matrix
            return response

        def response(index, mask):
            zdot0, matrix = response_columns(*linearization, self._grouped(at), index, mask)
            return (zdot0 if drive is None else self._grouped(drive)), matrix
        return response

    def _newton(self, state, base, sliding, rows, linearization):
        """A coupled system's multipliers: ż is multi-affine in the slopes (a product of the
        slopes of one example's pairs in different layers), so `equivalent_control`'s one
        linear solve is a Newton step from the box's middle. Where no example slides in two
        layers ż is affine in them and that step is exact: its ż on the sliding pairs is
        below `_AFFINE_RESIDUAL` of the start's, and it is the answer. Otherwise (a branch,
        taken by a whole vmapped batch) more steps while they shrink ż on the sliding pairs, at
        most `_COUPLED_ROUNDS` (a bounded loop: reverse-differentiable; at the root Newton's map
        has zero derivative in λ, so the derivative is the implicit function's). ``ok`` only
        where it converged: a last step below `_COUPLED_STEP`, or ż on the sliding pairs that
        respond to their slopes (stiffness ≠ 0) below `_COUPLED_RESIDUAL` of the start's
        (late in a flow, ż ~ 1e-13, round-off leaves it at ~1e-17 and the steps bounce at
        ~1e-5; a system with no root keeps it at its start's order). One sliding pair (`rows`
        1): one step is exact. `linearization`: `_linearization`'s value at `base` (shared
        with the other sizes)."""
        grouped = self._grouped(sliding)

        def step(at, linearization=None):
            slopes, ok, stiffness = equivalent_control(
                self._response(state, at, linearization=linearization), self._grouped(at),
                grouped, rows)
            return slopes.reshape(at.shape), ok, stiffness.reshape(at.shape)

        if rows == 1:
            return step(base, linearization)

        def rest(at, stiffness, zdot=None):
            zdot = self._zdot(state, at) if zdot is None else zdot
            return jnp.max(jnp.where(sliding & (stiffness != 0), jnp.abs(zdot), 0.0))

        small = _COUPLED_STEP * self._span()

        def round_(carry):
            at, ok, stiffness, _, residual, _ = carry
            slopes, fine, new_stiffness = step(at)
            new_residual = rest(slopes, new_stiffness)
            last = jnp.max(jnp.abs(slopes - at))
            better = new_residual <= residual
            going = better & (new_residual < _COUPLED_CONTRACTION * residual) & (last > small)
            return (jnp.where(better, slopes, at), jnp.where(better, ok & fine, ok),
                    jnp.where(better, new_stiffness, stiffness), last,
                    jnp.minimum(new_residual, residual), going)

        first = step(base, linearization)
        start = rest(base, first[2], linearization[0].reshape(base.shape))
        after_first = rest(first[0], first[2])
        affine = after_first <= _AFFINE_RESIDUAL * start

        def iterate():
            # Newton's steps while they still shrink ż on the sliding pairs (quadratically,
            # until round-off: one or two rounds), at most `_COUPLED_ROUNDS`; the best
            # multipliers seen are kept. Each round is a linearization and a solve of the
            # system: six fixed rounds were half the run of benchmarks.compile's depth-3 ReLU
            # MLP (12.3 s warm; 6.7 s with one round, the same limit to 1e-11).
            slopes, ok, stiffness, last, residual, _ = eqxi.while_loop(
                lambda c: c[5], round_,
                (*first, jnp.full((), jnp.inf), after_first, jnp.array(True)),
                max_steps=_COUPLED_ROUNDS, kind="bounded")
            converged = (last <= small) | (residual <= _COUPLED_RESIDUAL * start)
            return slopes, ok & converged, stiffness

        return jax.lax.cond(eqxi.unvmap_all(affine), lambda: first, iterate)

    def _solve_slopes(self, state, positive, sliding, drive=None, at=None):
        """The multipliers (`slopes`); with `drive` (n, m), those that cancel `drive` in
        place of the field's own ż, linearized at the slopes `at` (default: the base slopes;
        `_on_sliding_set`)."""
        base = self._base_slopes(positive, sliding)
        # A coupled system has two sizes only: each branch holds a Newton loop.
        sizes = (_system_sizes(self.max_sliding_rows) if self._separable()
                 else tuple(sorted({1, self.max_sliding_rows})))

        point = base if at is None else at

        def slide(rows, linearization):
            def solve():
                if drive is None and not self._separable():
                    return self._newton(state, base, sliding, rows, linearization)
                slopes, ok, stiffness = equivalent_control(
                    self._response(state, point, drive, linearization), self._grouped(point),
                    self._grouped(sliding), rows)
                return slopes.reshape(base.shape), ok, stiffness.reshape(base.shape)
            return solve

        # The system's size follows the largest sliding set of any neuron (rounded up to one
        # of `sizes`), so a flow with a few sliding pairs solves small systems, not one padded
        # system per neuron at the largest size. The size is reduced over any vmapped batch
        # (`unvmap_max`): a batched index would turn the switch into a select that solves the
        # multiplier system at every field evaluation of every member, sliding or not, which
        # costs a batch that rarely slides many times its run time. With no slide in the batch
        # the system is skipped; a member that does not slide gets `base` from it.
        most = eqxi.unvmap_max(jnp.max(jnp.sum(self._grouped(sliding), axis=0)))
        # (The smallest size ≥ most: a count, not `searchsorted`, whose loop XLA on CPU
        # compiles at every site of the field.)
        branch = jnp.minimum(jnp.sum(jnp.asarray(sizes) < most), len(sizes) - 1)

        def some_slide():
            # The field's linearization in the slopes, shared by the branches per size.
            linearization = self._linearization(state, point)
            return jax.lax.switch(branch, [slide(rows, linearization) for rows in sizes])

        return jax.lax.cond(most == 0, lambda: (base, jnp.array(True), jnp.zeros_like(base)),
                            some_slide)

    # --- switching -------------------------------------------------------------------------
    def _pair_values(self, state, positive, sliding):
        """Per pair: ``±z`` (positive on its side) or, if sliding, the distance of its
        multiplier to the nearer bound in units of ``hi − lo``; and the slopes and the
        regularity flag."""
        slopes, ok, _ = self.slopes(state, positive, sliding)
        return self._values(self.preactivations(state), slopes, positive, sliding), slopes, ok

    def _values(self, z, slopes, positive, sliding):
        """`_pair_values` from the pre-activations `z` and the mode's `slopes` (solved once
        and shared: each call of `slopes` is a copy of the multiplier system in the compiled
        program, which XLA inlines at every call site)."""
        lo, hi = self._bounds()
        margin = jnp.minimum(slopes - lo, hi - slopes) / self._span()
        return jnp.where(sliding, margin, jnp.where(positive, z, -z))

    def initial_mode(self, state) -> Mode:
        z = self.preactivations(state)
        positive = z >= 0
        lo, hi = self._bounds()
        # Nothing slides yet: the slopes are the sides' own, no multiplier system to solve.
        return self._with_offsets(state, positive, jnp.zeros_like(positive),
                                  jnp.where(positive, hi, lo))

    def _with_offsets(self, state, positive, sliding, slopes, old: Mode | None = None,
                      keep=True) -> Mode:
        """The mode with its event offsets, from the mode's (already solved) `slopes`.

        A pair on the wrong side of its kink (value < 0: one `_imminent` took across early, or
        one a located crossing left a round-off short) gets its threshold twice as far out, so
        that it fires only if it turns back. Given the `old` mode, the free pairs in `keep`
        whose side did not change keep their old threshold while they have not reached it:
        recomputed from the current value at every transition, the threshold of a pair that
        turned back and drifts away slowly doubled at each of thousands of one-step segments,
        and its event never fired (scikit-learn's digits, ReLU, σ = 5e-5: 71 free pairs up to
        z = 248 on the wrong side at loss 1e-30)."""
        values = self._values(self.preactivations(state), slopes, positive, sliding)
        offset = 2 * jnp.minimum(values, 0.0) - _OFFSET_FLOOR
        if old is not None:
            kept = (keep & ~sliding & ~old.sliding & (positive == old.positive) & (values < 0)
                    & (values > old.offset))
            offset = jnp.where(kept, old.offset, offset)
        # A sliding pair leaves when its multiplier is outside [lo, hi] by the transition's own
        # tolerance, not at round-off: a multiplier that sits at its bound (a neuron dead on
        # one side, the one-sided field tangent to z = 0) would otherwise leave and re-enter
        # the slide every few steps (thousands of switches on a ReLU TwoLayerNet).
        offset = jnp.where(sliding, jnp.minimum(offset, -_BOX_TOLERANCE), offset)
        return Mode(positive=positive, sliding=sliding, offset=offset, live=jnp.array(True))

    def event_components(self, t, state, mode: Mode):
        """Each pair's value less its offset (−1 everywhere where the multiplier system is
        singular) and the norm of the mode's unit-speed field (the direction, with the sliding
        pairs' multipliers, which at a Clarke-stationary limit minimize the norm over the
        Clarke set: [THEORY §8.3][theory-8-3]), from one multiplier solve."""
        values, slopes, ok = self._pair_values(state, mode.positive, mode.sliding)
        return self._components_and_norm(state, mode, values, slopes, ok)

    def _components_and_norm(self, state, mode, values, slopes, ok):
        field, _ = jax.flatten_util.ravel_pytree(self.unit_speed_field(state, slopes))
        return (jnp.where(ok, (values - mode.offset).ravel(), -1.0),
                jnp.linalg.norm(field))

    def _imminent(self, state, z, slopes, positive, sliding, first, rtol, atol):
        """The free pairs (besides `first`) about to reach their kink that the transition at
        `first` may take along: the k nearest in time, with k the largest power of two (or
        all) whose summed early switch moves the state by at most `CLUSTER_ERROR` in the
        error norm of an accepted step, ``rms(e / (atol + rtol·|state|))``. Only those that
        cross are switched early (`transition`); one that would slide waits for its own event.

        A pair q at distance ``|z_q|`` closing at ``|ż_q|`` on the field's direction reaches
        its kink after ``τ_q = |z_q|/|ż_q|`` (in units where the clock speed is 1; the speed
        cancels). Switching it now instead changes the direction by ``∂D/∂λ_q · Δλ_q`` for
        that long, so the state moves by ``e = Σ_q τ_q ∂D/∂λ_q Δλ_q``: one linear map of the
        affine direction, evaluated for each candidate k at once.

        Why: where pre-activations cross densely, locating every crossing on its own is a
        segment per crossing, one step each (on scikit-learn's digits, n = 50, m = 100, ReLU,
        σ = 1e-3, thousands of one-pair events leave the loss barely below its start)."""
        lo, hi = self._bounds()
        direction, linear = jax.linearize(lambda s: self.unit_speed_field(state, s), slopes)
        zdot = jax.jvp(self.preactivations, (state,), (direction,))[1]
        free = ~sliding & ~jnp.zeros_like(sliding).at[first].set(True)
        closing = free & jnp.where(positive, zdot < 0, zdot > 0)
        tau = jnp.where(closing, jnp.abs(z) / jnp.where(closing, jnp.abs(zdot), 1.0), jnp.inf)
        ordered = _sorted_nonnegative(tau.ravel())
        change = jnp.where(positive, lo - hi, hi - lo)
        flat_state, _ = jax.flatten_util.ravel_pytree(state)
        scale = atol + rtol * jnp.abs(flat_state)
        # The k nearest: τ at most the k-th smallest (ties go together).
        sizes = np.minimum(2 ** np.arange(int(np.ceil(np.log2(tau.size))) + 1), tau.size)
        reach = ordered[sizes - 1]

        def error(bound):
            shift = jnp.where((tau <= bound) & closing, tau * change, 0.0)
            moved, _ = jax.flatten_util.ravel_pytree(linear(shift))
            return jnp.sqrt(jnp.mean((moved / scale) ** 2))

        errors = jax.vmap(error)(reach)
        bound = jnp.max(jnp.where(errors <= CLUSTER_ERROR, reach, -jnp.inf))
        return (tau <= bound) & closing

    def transition(self, t, state, mode: Mode, *, rtol=None, atol=None
                   ) -> tuple[PyTree[Array], Mode, KinkCounters]:
        """Handle the pair whose event value reached 0 first (and, given the solve's `rtol`
        and `atol`, the free pairs about to reach their kinks within the error of one
        accepted step: `_imminent`).

        A free pair at ``z = 0`` joins the sliding set tentatively; a sliding pair whose
        multiplier reached a bound leaves on that bound's side. Then the multipliers are
        re-solved and, in each neuron, the sliding pair furthest outside ``[lo, hi]`` leaves on
        the side its multiplier points to (``λ > hi``: the field with slope hi still pushes
        ``z`` up, so the flow continues on ``z > 0``), until every multiplier is in the box
        (neurons' systems are independent, so each loses one pair per round). A free pair that
        leaves this way at once crossed (or touched tangentially); one that stays slides
        (Filippov: the one-sided fields point into the surface from both sides). Pairs taken
        along are settled first (`_settle`): while they slide tentatively only they may leave,
        so that one not yet at its kink cannot push the located pair out of the box. A free pair
        located beyond the event's tolerance (`_LOCATED`) on the wrong side of its kink is not at
        it: taken across early, it turned back to its threshold, and takes the side it is on.
        Sliding pairs located off their kink by more than round-off are then put on it
        (`_onto_kinks`) and the sets settled again at the moved state (`_settle`), and the new
        mode's event offsets are those of the state returned, with
        the thresholds of the other pairs kept where they have not been reached
        (`_with_offsets`).
        """
        lo, hi = self._bounds()
        z = self.preactivations(state)
        slopes, ok0, _ = self.slopes(state, mode.positive, mode.sliding)
        values = self._values(z, slopes, mode.positive, mode.sliding)
        p = jnp.unravel_index(jnp.argmin(values - mode.offset), values.shape)
        was_sliding = mode.sliding[p]
        leaves_up = (slopes[p] - lo) > (hi - slopes[p])
        # Without a kink (hi = lo: a traced slope γ = 1) a pair at z = 0 just crosses.
        kinked = hi > lo
        if rtol is None:
            along = jnp.zeros_like(mode.sliding)
        else:
            along = kinked & self._imminent(state, z, slopes, mode.positive, mode.sliding, p,
                                            rtol, atol)
        # A free pair located beyond the event's tolerance on the wrong side of its kink came
        # back to the threshold its offset set (it was taken across early and turned back): it
        # is on the other side, not at its kink, so it takes that side and does not slide.
        returned = ~was_sliding & (values[p] < -_LOCATED)
        sliding = mode.sliding.at[p].set(~was_sliding & kinked & ~returned) | along
        positive = mode.positive.at[p].set(jnp.where(
            was_sliding, leaves_up,
            jnp.where(kinked & ~returned, mode.positive[p], ~mode.positive[p])))
        moved, sliding, positive, lam, ok = self._settle(state, sliding, positive, along)
        # The rounds' loop is not reverse-differentiable (a while loop): the offsets and the
        # field's norm take the multipliers as constants (the offsets only shift a pair that
        # starts on its wrong side; the norm decides, it is not differentiated).
        lam = jax.lax.stop_gradient(lam)
        field, _ = jax.flatten_util.ravel_pytree(self.unit_speed_field(moved, lam))
        stay = along & (positive == mode.positive)  # taken along, but did not cross
        components, event_field_norm = self._components_and_norm(
            state, mode, values, jax.lax.stop_gradient(slopes), ok0)
        event_value = jnp.min(components)
        counters = KinkCounters(
            switches=1 + jnp.sum(along & ~stay), slides=jnp.sum(sliding & ~mode.sliding),
            exits=jnp.sum(mode.sliding & ~sliding), degenerate=~(ok & ok0),
            field_norm=jnp.linalg.norm(field), event_value=event_value,
            event_field_norm=event_field_norm)
        state = moved
        # Every pair but the located one keeps a threshold it has not reached.
        others = ~jnp.zeros_like(sliding).at[p].set(True)
        return state, self._with_offsets(state, positive, sliding, lam, mode, others), counters

    def _onto_kinks(self, state, z, sliding, positive):
        """`state` with the sliding pairs that are off their kink (`z`: the pre-activations at
        `state`) by more than round-off and at most `_LOCATED` put on it (`kink_shift`; a
        branch: rare, and the only site of its system).

        The shift must not carry a free pair across its kink: one a few ulps from it would
        then fire its event at once with nothing to locate, and its transition could release
        the pair just put on its kink, which the next transition puts back (digits, σ = 1e-4,
        ReLU: neuron 46's pairs 3 and 35, 20 000 switches at one clock value). So a round
        holds, besides the sliding pairs, the free pairs the previous round's shift carried
        across, up to `_HOLD_ROUNDS` rounds; a shift that still carries one across, or holds
        more pairs on a neuron than its system has rows, is not applied."""
        size = jnp.abs(z)
        off = sliding & (size > _ON_KINK * jnp.max(size)) & (size <= _LOCATED)
        fixed = jax.lax.stop_gradient(state)
        side = jnp.where(z != 0, z > 0, positive)

        def crossed(shift):
            moved = self.preactivations(jax.tree_util.tree_map(jnp.add, fixed, shift))
            return ~sliding & ((moved > 0) != side) & (moved != 0)

        def more(carry):
            _, shift, rounds = carry
            return (rounds == 0) | ((rounds <= _HOLD_ROUNDS) & jnp.any(crossed(shift)))

        def round_(carry):
            held, shift, rounds = carry
            held = held | crossed(shift)
            return held, kink_shift(lambda s: self._grouped(self.preactivations(s)), fixed,
                                    self._grouped(sliding | held), self._grouped(off),
                                    self.max_sliding_rows), rounds + 1

        def project():
            start = (jnp.zeros_like(sliding), jax.tree_util.tree_map(jnp.zeros_like, fixed), 0)
            held, shift, _ = jax.lax.while_loop(more, round_, start)
            fits = jnp.max(jnp.sum(self._grouped(sliding | held), axis=0)
                           ) <= self.max_sliding_rows
            apply = fits & ~jnp.any(crossed(shift))
            return jax.tree_util.tree_map(lambda s, d: s + jnp.where(apply, d, 0.0),
                                          state, shift)

        return jax.lax.cond(eqxi.unvmap_any(jnp.any(off)), project, lambda: state)

    def _settle(self, state, sliding, positive, along):
        """`transition`'s rounds: re-solve the multipliers and, in each neuron, let the sliding
        pair furthest outside ``[lo, hi]`` leave, until every multiplier is in the box. A
        do-while loop whose body holds the one multiplier solve (the sets of the last round
        are kept, with their multipliers). The pairs taken `along` go first: while any of them
        slides tentatively only they may leave (crossing early); the ones left in the box go
        back to their sides, and then the rest settle; then the sliding pairs are put on their
        kinks (`_onto_kinks`) and, where that moved the state, settled again there. Returns
        ``(state, sliding, positive, slopes, ok)``, the slopes those at the state returned."""
        lo, hi = self._bounds()

        def violation(lam, stiffness, sliding):
            # A repelling slide (stiffness > 0) goes first; then the multiplier furthest out. A
            # neutral one (stiffness 0: its ż responds to no slope, e.g. x = 0) stays.
            outside = jnp.maximum(lo - lam, lam - hi) / self._span()
            return jnp.where(sliding, jnp.where(stiffness <= 0, outside, jnp.inf), -jnp.inf)

        def body(carry):
            state, sliding, positive, _, _, it, _, projected = carry
            lam, ok, stiffness = self.slopes(state, positive, sliding)
            # A neutral sliding pair (its slope moves no ż: x = 0, or a zero residual or output
            # weight) is held at its kink by nothing: where the others' slopes move it, the
            # one-sided fields agree and it just crosses, to the side its ż points.
            zdot = self._zdot(state, lam)
            drift = sliding & (stiffness == 0) & (
                jnp.abs(zdot) > _NEUTRAL_DRIFT * jnp.max(jnp.abs(zdot)))
            v = jnp.where(drift, jnp.inf, violation(lam, stiffness, sliding))
            # While pairs taken along still slide tentatively, only they may leave: one of
            # them, not yet at its kink, must not push the located pair (or a sliding one) out
            # of the box in its neuron's system (digits, ReLU, σ = 5e-5: a located pair whose
            # one-sided fields both point into its kink was sent back to its side that way,
            # then drifted across unseen).
            pending = jnp.any(along & sliding)
            v = jnp.where(pending & ~along, -jnp.inf, v)
            go = ok & ((jnp.max(v) > _BOX_TOLERANCE) | pending) & (it <= sliding.size)
            grouped = self._grouped(v)  # one pair leaves per system and round
            q = jnp.argmax(grouped, axis=0)
            leave = go & jnp.zeros(grouped.shape, bool).at[
                q, jnp.arange(grouped.shape[1])].set(
                jnp.max(grouped, axis=0) > _BOX_TOLERANCE).reshape(v.shape)
            # The side the flow leaves to is where ż = stiffness·(bound − λ) points; a
            # repelling pair with λ inside the box keeps the side it arrived from.
            up = jnp.where(stiffness <= 0, lam > hi,
                           jnp.where(lam < lo, True, jnp.where(lam > hi, False, positive)))
            positive = jnp.where(leave, jnp.where(drift, zdot > 0, up), positive)
            # Once every multiplier is in the box, a pair taken along that would slide goes
            # back to its side (and the rest is re-solved): it has not reached its kink yet,
            # and its own event will pin it at z = 0 exactly (pinned now, it would slide at
            # z ≠ 0, and a diagnostic looking for pairs at their kinks would miss it).
            settled = go & ~jnp.any(leave)
            sliding = sliding & ~leave & ~(settled & along)
            # Settled: the sliding pairs go onto their kinks, once, and where that moved the
            # state the sets are settled again there, so that the multipliers returned (which
            # set the new mode's event offsets) are the ones its event function solves at the
            # state returned. (Student 80 of benchmarks/students.py: the move cancelled an
            # example's residual, leaving a pair of it a round-off column and a multiplier of
            # −3e8 at the moved state; the offsets from the multipliers before the move put
            # the event value at −3e8 from the start, and with only down-crossings seen, no
            # event, the loss's included, fired again: the tail ran to its step budget.)
            project = ~go & ~projected & ok
            moved = jax.lax.cond(eqxi.unvmap_any(project), lambda: self._onto_kinks(
                state, self.preactivations(state), sliding, positive), lambda: state)
            moved = jax.tree_util.tree_map(lambda a, b: jnp.where(project, a, b), moved, state)
            again = project & jnp.any(jnp.stack([jnp.any(a != b) for a, b in zip(
                jax.tree_util.tree_leaves(moved), jax.tree_util.tree_leaves(state))]))
            return (moved, sliding, positive, lam, ok, it + 1, go | again,
                    projected | project)

        lam0 = jnp.zeros(sliding.shape, float)
        fixed = jax.lax.stop_gradient(state)  # a while loop: the move is held constant
        moved, sliding, positive, lam, ok, _, _, _ = jax.lax.while_loop(
            lambda carry: carry[-2], body,
            (fixed, sliding, positive, lam0, jnp.array(True), jnp.array(0), jnp.array(True),
             jnp.array(False)))
        state = jax.tree_util.tree_map(lambda s, m, f: s + (m - f), state, moved, fixed)
        return state, sliding, positive, lam, ok
