"""ibflow: exact implicit-bias flows.

Integrates the training dynamics of any Equinox model (gradient flow, mirror flow, warped flows,
classification flows in the loss clock) as ODEs with Diffrax to their limit points, through one
engine with one result type (`Solution`) and one status enumeration (`Status`), and puts them
next to the closed-form implicit regularizers of the literature. Importing ibflow turns on
float64 (``jax_enable_x64``): limit points are compared at 1e-10 relative, which float32 cannot
resolve.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._cache import enable_compilation_cache as _enable_compilation_cache  # noqa: E402

_enable_compilation_cache()

from . import data as data  # noqa: E402

# -- Models and their capabilities --
from ._models.base import (  # noqa: E402
    AbstractLinearModel as AbstractLinearModel,
    AbstractInvariantModel as AbstractInvariantModel,
    AbstractModel as AbstractModel,
    AbstractPredictorModel as AbstractPredictorModel,
    AbstractReducibleModel as AbstractReducibleModel,
)
from ._models.diagonal import DiagonalNet as DiagonalNet  # noqa: E402
from ._models.fully_connected import FullyConnectedNet as FullyConnectedNet  # noqa: E402
from ._models.leaky_neuron import LeakyReLUNeuron as LeakyReLUNeuron  # noqa: E402
from ._models.linear import LinearModel as LinearModel  # noqa: E402
from ._models.two_layer import TwoLayerNet as TwoLayerNet  # noqa: E402
from ._activations.base import (  # noqa: E402
    AbstractActivation as AbstractActivation,
    AbstractPiecewiseLinearActivation as AbstractPiecewiseLinearActivation,
)
from ._activations.relu import (  # noqa: E402
    Absolute as Absolute,
    Identity as Identity,
    LeakyReLU as LeakyReLU,
    ReLU as ReLU,
)
from ._activations.smooth import (  # noqa: E402
    FunctionActivation as FunctionActivation,
    Softplus as Softplus,
    Tanh as Tanh,
)
from ._models.shallow import (  # noqa: E402
    AbstractBiasDistribution as AbstractBiasDistribution,
    GaussianBias as GaussianBias,
    ShallowNet as ShallowNet,
    UniformBias as UniformBias,
)
from ._models.classifier import TwoLayerClassifier as TwoLayerClassifier  # noqa: E402
from ._models.cost import AbstractCostEstimate as AbstractCostEstimate  # noqa: E402

# -- Losses --
from ._losses import (  # noqa: E402
    AbstractLoss as AbstractLoss,
    ExponentialLoss as ExponentialLoss,
    LogisticLoss as LogisticLoss,
    SquareLoss as SquareLoss,
)

# -- Flows and mirror potentials --
from ._flows.base import AbstractFlow as AbstractFlow  # noqa: E402
from ._flows.gradient import GradientFlow as GradientFlow  # noqa: E402
from ._flows.mirror import MirrorFlow as MirrorFlow  # noqa: E402
from ._flows.warped import WarpedFlow as WarpedFlow  # noqa: E402
from ._flows.loss_clock import LossClock as LossClock  # noqa: E402
from ._potentials.base import AbstractPotential as AbstractPotential  # noqa: E402
from ._potentials.cosh import CoshPotential as CoshPotential  # noqa: E402
from ._potentials.cubic import CubicPotential as CubicPotential  # noqa: E402
from ._potentials.function import FunctionPotential as FunctionPotential  # noqa: E402
from ._potentials.mixture import MixturePotential as MixturePotential  # noqa: E402
from ._potentials.polynomial import PolynomialPotential as PolynomialPotential  # noqa: E402
from ._potentials.quadratic import QuadraticPotential as QuadraticPotential  # noqa: E402
from ._potentials.quartic import QuarticPotential as QuarticPotential  # noqa: E402
from ._potentials.scaling import (  # noqa: E402
    AbstractScaling as AbstractScaling,
    Unscaled as Unscaled,
    WidthScaled as WidthScaled,
)

# -- The engine: integrate, formulations, one result and one status --
from ._integrate import integrate as integrate  # noqa: E402
from ._formulation import (  # noqa: E402
    AbstractFormulation as AbstractFormulation,
    ParameterSpace as ParameterSpace,
    PreferReduction as PreferReduction,
    Reduction as Reduction,
)
from ._solution import Solution as Solution, Trajectory as Trajectory  # noqa: E402
from ._kinks.mode import EVENT_KINDS as EVENT_KINDS, KinkReport as KinkReport  # noqa: E402
from ._tail.equilibrium import EquilibriumNewton as EquilibriumNewton  # noqa: E402
from ._status import Status as Status  # noqa: E402

# -- Discrete descent (Optax) for comparison --
from ._discrete import (  # noqa: E402
    DescentResult as DescentResult,
    descend as descend,
    mirror_descent as mirror_descent,
)
from ._classification.descent import gradient_descent as gradient_descent  # noqa: E402

# -- Theory: regularizers, exact minimizer, Hessian-map test, NTK, interpolants --
from ._interpolants import (  # noqa: E402
    min_l1_interpolant as min_l1_interpolant,
    min_l2_interpolant as min_l2_interpolant,
)
from ._theory.hessian_map import (  # noqa: E402
    DiagonalInverseMetric as DiagonalInverseMetric,
    HessianMapAsymmetry as HessianMapAsymmetry,
    NeuronInverseMetric as NeuronInverseMetric,
    hessian_map_asymmetry as hessian_map_asymmetry,
    inverse_metric_field as inverse_metric_field,
    predictor_inverse_metric as predictor_inverse_metric,
    predictor_jacobian as predictor_jacobian,
)
from ._theory.ntk import (  # noqa: E402
    ntk_outputs as ntk_outputs,
    ntk_predictor as ntk_predictor,
    ntk_rkhs_norm as ntk_rkhs_norm,
    output_jacobian as output_jacobian,
    tangent_kernel as tangent_kernel,
)
from ._theory.implicit_bias import (  # noqa: E402
    NoExactRegularizer as NoExactRegularizer,
    implicit_bias as implicit_bias,
)
from ._theory.minimizer import (  # noqa: E402
    RegularizerMinimum as RegularizerMinimum,
    minimize_regularizer as minimize_regularizer,
)
from ._theory.regularizers.base import (  # noqa: E402
    AbstractLegendreRegularizer as AbstractLegendreRegularizer,
    AbstractRegularizer as AbstractRegularizer,
)
from ._theory.regularizers.diagonal import DiagonalNetRegularizer as DiagonalNetRegularizer  # noqa: E402
from ._theory.regularizers.l1 import L1Norm as L1Norm  # noqa: E402
from ._theory.regularizers.leaky_neuron import LeakyNeuronRegularizer as LeakyNeuronRegularizer  # noqa: E402
from ._theory.regularizers.quadratic import L2Norm as L2Norm, WeightedL2Norm as WeightedL2Norm  # noqa: E402
from ._theory.regularizers.single_neuron import SingleNeuronRegularizer as SingleNeuronRegularizer  # noqa: E402

# -- Mirror-flow variational problems --
from ._variational.abs import abs_variational as abs_variational  # noqa: E402
from ._variational.relu import relu_variational as relu_variational  # noqa: E402
from ._variational.solution import VariationalSolution as VariationalSolution  # noqa: E402

# -- Classification: flow in the loss clock and diagnostics --
from ._classification.diagnostics import (  # noqa: E402
    ClassifierDiagnostics as ClassifierDiagnostics,
    KKTResidual as KKTResidual,
    classifier_diagnostics as classifier_diagnostics,
    kkt_residual as kkt_residual,
    kkt_residuals as kkt_residuals,
    normalized_margins as normalized_margins,
    stable_rank as stable_rank,
    trajectory_diagnostics as trajectory_diagnostics,
)
from ._classification.flow import classification_flow as classification_flow  # noqa: E402

# -- Sweeps --
from ._sweep.grid import Grid as Grid  # noqa: E402
from ._sweep.order import (  # noqa: E402
    AbstractOrder as AbstractOrder,
    CostOrder as CostOrder,
    GridOrder as GridOrder,
    diagonal_plateau_cost as diagonal_plateau_cost,
)
from ._sweep.result import SweepResult as SweepResult, open_sweep as open_sweep  # noqa: E402
from ._sweep.sweep import sweep as sweep  # noqa: E402

# -- Differentiable limits --
from ._differentiable.implicit import differentiable_minimize as differentiable_minimize  # noqa: E402
from ._differentiable.limit import LimitPoint as LimitPoint, limit_point as limit_point  # noqa: E402
from ._differentiable.optimize_shape import (  # noqa: E402
    ShapeOptimization as ShapeOptimization,
    optimize_shape as optimize_shape,
)
from ._differentiable.through_solve import solve_limit as solve_limit  # noqa: E402

__version__ = "0.1.0"

_DEPRECATED = {"MinimizerStatus": ("Status", lambda: Status),
               "ClassificationSolution": ("Solution", lambda: Solution),
               "ClassifierTrajectory": ("Trajectory", lambda: Trajectory)}


def __getattr__(name):
    # Short deprecation path for names merged into the one result/status API.
    if name in _DEPRECATED:
        import warnings

        new, get = _DEPRECATED[name]
        warnings.warn(f"ibflow.{name} is deprecated; use ibflow.{new}.", DeprecationWarning,
                      stacklevel=2)
        return get()
    raise AttributeError(f"module 'ibflow' has no attribute {name!r}")
