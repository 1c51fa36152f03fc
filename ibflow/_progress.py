"""Progress of a flow, counted in decades of loss.

Diffrax's own progress meters (`diffrax.TqdmProgressMeter`) report ``(t − t0)/(t1 − t0)``, which
says nothing for an event-terminated solve with ``t1 = t_max = 1e14``. A flow's progress is how
far its loss has fallen towards the target on a log scale, so this meter is fed by the stop
event (evaluated once per step with the current loss) through `jax.debug.callback`: a tqdm bar of
``log10(L₀/target)`` decades, with the current loss and the solver steps taken so far (the
same count as `Solution.steps`: the bar is closed on that number).

Bars go to stderr, and by default (``progress=None`` where an entry point offers it) only when
stderr is a terminal: piped to a file, a log holds results, not carriage returns. A first call
compiles for seconds to minutes before the bar can open, so tracing a flow with a bar prints
one "compiling…" line first.
"""

import math
import sys
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np

#: Meters whose bar may be open (closed on the host by `close_open_bars`).
_METERS: "weakref.WeakSet[LossProgress]" = weakref.WeakSet()


def resolve(progress: bool | None, stream=None) -> bool:
    """Whether to draw bars: `progress` where given, else whether `stream` (stderr) is a
    terminal."""
    if progress is not None:
        return bool(progress)
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def line(text: str) -> None:
    """One progress line on stderr, at once (kept in a log, where bars are not drawn)."""
    print(text, file=sys.stderr, flush=True)


def lines(progress: bool):
    """`line` where `progress` (``--progress``, or stderr is a terminal), else a function that
    prints nothing: the progress lines of a long reproduction."""
    return line if progress else (lambda text: None)


def compiling(what: str) -> None:
    """One line on stderr before a long first call (tracing and XLA compilation)."""
    line(f"ibflow: compiling {what} (first call for these shapes and options; later calls, "
         "and later runs through the compilation cache, skip this)…")


def bar(total: int, *, desc: str, unit: str, initial: int = 0, progress: bool | None = None):
    """A tqdm bar on stderr labelled `desc`, or a no-op bar when `resolve(progress)` is false."""
    if not resolve(progress):
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr,
                smoothing=0.1, dynamic_ncols=True)


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, *args, **kwargs):
        pass

    def close(self):
        pass


def close_open_bars() -> None:
    """Close every flow bar still open, on the host (after the result is ready and before a
    summary is printed: the in-graph close is an unordered callback)."""
    for meter in list(_METERS):
        meter._close(None)


class LossProgress:
    """Host-side progress bar; `start`, `update` and `close` are called inside traced code."""

    def __init__(self):
        self._bar = None
        self._start = None
        self._decades = None
        self._steps = 0
        _METERS.add(self)

    @classmethod
    def start(cls, loss0, target) -> "LossProgress":
        """Called while tracing a solve (so once per compilation: the "compiling…" line)."""
        compiling("the flow")
        meter = cls()
        jax.debug.callback(meter._open, loss0, target, ordered=False)
        return meter

    def update(self, loss, steps=None):
        """One more step at `loss`; `steps`, where given, is the exact count so far."""
        steps = jnp.asarray(-1 if steps is None else steps)
        jax.debug.callback(self._update, loss, steps)

    def close(self, steps):
        """Close the bar on the final step count `steps` (`Solution.steps`)."""
        jax.debug.callback(self._close, steps)

    # -- host side ---------------------------------------------------------------------------
    def _open(self, loss0, target):
        from tqdm.auto import tqdm

        loss0, target = float(np.max(loss0)), float(np.max(target))
        self._start = max(loss0, 1e-300)
        self._decades = max(math.log10(self._start / max(target, 1e-300)), 1e-12)
        self._steps, self._loss, self._drawn = 0, self._start, time.monotonic()
        if self._bar is not None:
            self._bar.close()
        self._bar = tqdm(total=round(self._decades, 2), unit="decade", file=sys.stderr,
                         desc="flow: loss", bar_format="{desc} {percentage:3.0f}%|{bar}| "
                         "{n:.1f}/{total:.1f} decades [{elapsed}{postfix}]")

    def _update(self, loss, steps):
        if self._bar is None:
            return
        steps = int(np.max(steps))
        self._steps = steps if steps >= 0 else self._steps + 1
        self._loss = float(np.max(loss))
        # Every 16 steps, at an exact count, or after 0.1 s (a segment of a kinked flow).
        if self._steps % 16 == 0 or steps >= 0 or time.monotonic() - self._drawn > 0.1:
            self._draw()

    def _draw(self):
        value = self._loss
        done = 0.0 if not value > 0 else math.log10(self._start / value)
        self._bar.n = round(min(max(done, 0.0), self._decades), 2)
        self._bar.set_postfix_str(f"loss {value:.2e}, {self._steps} steps", refresh=False)
        self._bar.refresh()
        self._drawn = time.monotonic()

    def _close(self, steps):
        if self._bar is None:
            return
        if steps is not None:
            self._steps = int(np.max(steps))
            self._draw()
        self._bar.close()
        self._bar = None
