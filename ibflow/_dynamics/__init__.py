"""The ODEs the engine solves: a state, its vector field, and the map back to a model.

Layer 2 (dynamics, see `docs/architecture.md`): built from the flows, regularizers and tail
pieces below; knows no concrete model (each model builds its own reduction from these classes).
"""

from .base import AbstractConvexGradientDynamics as AbstractConvexGradientDynamics
from .base import AbstractDynamics as AbstractDynamics
from .diagonal import DiagonalReducedDynamics as DiagonalReducedDynamics
from .parameters import ParameterDynamics as ParameterDynamics
