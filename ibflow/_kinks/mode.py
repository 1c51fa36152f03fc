"""The discrete state of a kinked flow and the counts reported about it."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


class Mode(eqx.Module):
    """Activation mode of every (example i, neuron j) pair, shape (n, m).

    **Fields:**
    - `positive`: the pair's side: True for ``z > 0`` (slope ``hi``), False for ``z < 0``.
      Meaningless while sliding.
    - `sliding`: the pair is pinned at ``z = 0`` with an equivalent-control slope
      ``λ ∈ [lo, hi]`` (Filippov sliding, [THEORY §8.2][theory-8-2]).
    - `offset`: subtracted from each pair's event value so that every value starts the segment
      positive (a pair that has just crossed sits at ``|z| ≈ root-finder accuracy`` on either
      side of 0; it must not trigger again, nor mask a later switch of another pair).
    - `live`: False in the mode the segment loop hands to the solver of a vmapped member that
      is done already (`ibflow._segments.run_segments`; its sliding set is then empty too).
      Such a member takes no step, but a batched loop still evaluates its field at every step
      of the others: its mode must not make the batch's shared choices (`lax.cond` on a
      predicate reduced over the batch: the multiplier system's size, the tail's exact
      Jacobian) for the members that run.
    """

    positive: Bool[Array, "n m"]
    sliding: Bool[Array, "n m"]
    offset: Float[Array, "n m"]
    live: Bool[Array, ""]


class KinkCounters(eqx.Module):
    """What one transition did (one located event; several pairs may switch at it), or
    running totals over a solve.

    **Fields:**
    - `switches`: events processed (crossings, slide entries and exits, tangential touches).
    - `slides`: slide entries. `exits`: slide exits.
    - `degenerate`: the equivalent-control system was singular or had more sliding rows
      than the solver handles.
    - `field_norm`: the norm of the unit-speed field in the new mode (the segment loop's
      stationarity test at the next segment's start, whose event could not see a flow that
      is already at rest there).
    - `event_value`, `event_field_norm`: the event function's value and the field's norm in
      the *old* mode at the event (the minimum of
      `AbstractSwitchingDynamics.event_components`), from the transition's own multiplier
      solve: the segment loop reads how the segment ended from them (each solve is a copy
      of the multiplier system in the compiled program).
    """

    switches: Int[Array, ""]
    slides: Int[Array, ""]
    exits: Int[Array, ""]
    degenerate: Bool[Array, ""]
    field_norm: Float[Array, ""]
    event_value: Float[Array, ""]
    event_field_norm: Float[Array, ""]


class KinkReport(eqx.Module):
    """Per-solution report of a kinked flow ([THEORY §8.2][theory-8-2]).

    **Fields:**
    - `switches`: number of pair switches (crossings, slide entries and exits; at one located
      event, pairs about to cross within one step's error cross with it).
    - `slides`: number of slide entries; `exits`: number of slide exits.
    - `sliding_time`: total flow time during which at least one pair was sliding.
    - `pattern`: the final activation pattern (n, m), True where ``z > 0``.
    - `sliding`: the final sliding set (n, m).
    - `event_clock` (`EVENT_LOG`,): the clock values of the first `EVENT_LOG` located events
      (``inf`` after the last); `event_kind`: what each did, an index into `EVENT_KINDS` (−1:
      none).
    """

    switches: Int[Array, ""]
    slides: Int[Array, ""]
    exits: Int[Array, ""]
    sliding_time: Float[Array, ""]
    pattern: Bool[Array, "n m"]
    sliding: Bool[Array, "n m"]
    event_clock: Float[Array, " K"]
    event_kind: Int[Array, " K"]


#: Events a `KinkReport` logs, at most this many per solve (the first ones).
EVENT_LOG = 64
#: ``KinkReport.event_kind`` values: a pair crossed its kink (or touched it), a pair began to
#: slide, a sliding pair left the kink.
EVENT_KINDS = ("cross", "slide", "exit")


def empty_report(mode: Mode) -> KinkReport:
    """A report with no event yet, at `mode`."""
    return KinkReport(switches=jnp.array(0), slides=jnp.array(0), exits=jnp.array(0),
                      sliding_time=jnp.zeros(()), pattern=mode.positive, sliding=mode.sliding,
                      event_clock=jnp.full(EVENT_LOG, jnp.inf),
                      event_kind=jnp.full(EVENT_LOG, -1))


def logged(report: KinkReport, switched, counts: KinkCounters, t, duration, mode: Mode,
           old_mode: Mode) -> KinkReport:
    """`report` after one segment of `duration` ending at `t`: the counts and the log entry of
    its switch (where it `switched`), the sliding time, the mode it continues in."""
    # The log's entry: the next free one (dropped past the end, or when nothing switched).
    entry = jnp.where(switched, jnp.sum(report.event_kind >= 0), EVENT_LOG)
    kind = jnp.where(counts.exits > 0, 2, jnp.where(counts.slides > 0, 1, 0))
    return KinkReport(
        switches=report.switches + jnp.where(switched, counts.switches, 0),
        slides=report.slides + jnp.where(switched, counts.slides, 0),
        exits=report.exits + jnp.where(switched, counts.exits, 0),
        sliding_time=report.sliding_time + jnp.where(jnp.any(old_mode.sliding), duration, 0.0),
        pattern=mode.positive, sliding=mode.sliding,
        event_clock=report.event_clock.at[entry].set(t, mode="drop"),
        event_kind=report.event_kind.at[entry].set(kind, mode="drop"))
