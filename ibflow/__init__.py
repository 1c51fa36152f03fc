"""ibflow: exact implicit-bias flows.

Integrates the training dynamics of small models (gradient flow, mirror flow, warped flows) as
ODEs with Diffrax to their limit points, and puts them next to the closed-form implicit
regularizers of the literature. Importing ibflow turns on float64 (``jax_enable_x64``): limit
points are compared at 1e-8 relative, which float32 cannot resolve.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import data as data  # noqa: E402
from ._flows.base import AbstractFlow as AbstractFlow  # noqa: E402
from ._flows.gradient import GradientFlow as GradientFlow  # noqa: E402
from ._integrate import integrate as integrate  # noqa: E402
from ._interpolants import (  # noqa: E402
    min_l1_interpolant as min_l1_interpolant,
    min_l2_interpolant as min_l2_interpolant,
)
from ._losses import (  # noqa: E402
    AbstractLoss as AbstractLoss,
    ExponentialLoss as ExponentialLoss,
    LogisticLoss as LogisticLoss,
    SquareLoss as SquareLoss,
)
from ._models.base import (  # noqa: E402
    AbstractLinearModel as AbstractLinearModel,
    AbstractModel as AbstractModel,
    AbstractPredictorModel as AbstractPredictorModel,
)
from ._models.diagonal import DiagonalNet as DiagonalNet  # noqa: E402
from ._models.fully_connected import FullyConnectedNet as FullyConnectedNet  # noqa: E402
from ._models.leaky_neuron import LeakyReLUNeuron as LeakyReLUNeuron  # noqa: E402
from ._solution import Solution as Solution, Status as Status, Trajectory as Trajectory  # noqa: E402

# -- theory (issue 3) --
# -- mirror and warped flows, shallow networks (issue 5) --
# -- classification (issue 6) --
# -- sweeps (issue 4) --
# -- differentiable limits (issue 8) --

__version__ = "0.1.0"
