"""Progress of a flow, measured in decades of loss.

Diffrax's own progress meters (`diffrax.TqdmProgressMeter`) report ``(t − t0)/(t1 − t0)``, which
says nothing for an event-terminated solve with ``t1 = t_max = 1e14``. A flow's progress is how
far its loss has fallen towards the target on a log scale, so this meter is fed by the stop
event (evaluated once per step with the current loss) through `jax.debug.callback`: a tqdm bar of
``log10(L₀/target)`` decades, with the current loss and the step rate.
"""

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np


class LossProgress:
    """Host-side progress bar; `start`, `update` and `close` are called inside traced code."""

    def __init__(self):
        self._bar = None
        self._start = None
        self._decades = None
        self._steps = 0

    @classmethod
    def start(cls, loss0, target) -> "LossProgress":
        meter = cls()
        jax.debug.callback(meter._open, loss0, target, ordered=False)
        return meter

    def update(self, loss):
        jax.debug.callback(self._update, loss)

    def close(self):
        jax.debug.callback(self._close, jnp.zeros(()))

    # -- host side ---------------------------------------------------------------------------
    def _open(self, loss0, target):
        from tqdm.auto import tqdm

        loss0, target = float(np.max(loss0)), float(np.max(target))
        self._start = max(loss0, 1e-300)
        self._decades = max(math.log10(self._start / max(target, 1e-300)), 1e-12)
        self._steps = 0
        if self._bar is not None:
            self._bar.close()
        self._bar = tqdm(total=round(self._decades, 2), unit="decade", file=sys.stderr,
                         desc="flow: loss", bar_format="{desc} {percentage:3.0f}%|{bar}| "
                         "{n:.1f}/{total:.1f} decades [{elapsed}{postfix}]")

    def _update(self, loss):
        if self._bar is None:
            return
        self._steps += 1
        value = float(np.max(loss))
        done = 0.0 if not value > 0 else math.log10(self._start / value)
        done = min(max(done, 0.0), self._decades)
        if self._steps % 16 == 0 or done >= self._decades:
            self._bar.n = round(done, 2)
            self._bar.set_postfix_str(f"loss {value:.2e}, {self._steps} evaluations",
                                      refresh=False)
            self._bar.refresh()

    def _close(self, _):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
