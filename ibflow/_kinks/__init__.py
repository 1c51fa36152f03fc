"""Exact flows through activation kinks: event-located switches and Filippov sliding
([THEORY §8.2][theory-8-2]). The engine's one segment loop (`ibflow._segments`) runs them
(`ibflow.integrate` on an `AbstractPiecewiseLinearModel`).

Layer 3 (switching dynamics, see `docs/architecture.md`): above the smooth dynamics, below the
models that build them."""

from .base import AbstractSwitchingDynamics as AbstractSwitchingDynamics
from .dynamics import PiecewiseLinearDynamics as PiecewiseLinearDynamics
from .kinked import AbstractKinkedDynamics as AbstractKinkedDynamics
from .mode import (EVENT_KINDS as EVENT_KINDS, EVENT_LOG as EVENT_LOG,
                   KinkCounters as KinkCounters, KinkReport as KinkReport, Mode as Mode)
