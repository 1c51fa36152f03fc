"""The ODEs the engine solves: a state, its vector field, and the map back to a model."""

from .base import AbstractConvexGradientDynamics as AbstractConvexGradientDynamics
from .base import AbstractDynamics as AbstractDynamics
from .diagonal import DiagonalReducedDynamics as DiagonalReducedDynamics
from .parameters import ParameterDynamics as ParameterDynamics
