"""Exact flows through activation kinks: event-located switches and Filippov sliding
(THEORY §8.2)."""

from .base import AbstractSwitchingDynamics as AbstractSwitchingDynamics
from .dynamics import PiecewiseLinearDynamics as PiecewiseLinearDynamics
from .integrate import integrate_kinked as integrate_kinked
from .mode import KinkCounters as KinkCounters, KinkReport as KinkReport, Mode as Mode
from .segments import solve_segments as solve_segments
