"""ibflow: exact implicit-bias flows.

Integrates the training dynamics of any Equinox model (gradient flow, mirror flow, warped flows,
classification flows in the loss clock) as ODEs with Diffrax to their limit points, through one
engine with one result type (`Solution`) and one status enumeration (`Status`), and puts them
next to the closed-form implicit regularizers of the literature. Importing ibflow turns on
float64 (``jax_enable_x64``): limit points are compared at 1e-10 relative, which float32 cannot
resolve. It also adds one XLA:CPU code-generation flag to ``XLA_FLAGS`` (`CPU_CODEGEN_FLAG`;
``IBFLOW_XLA_FLAGS=0`` keeps XLA's defaults).
"""

import os as _os
import sys as _sys

from ._version import __version__ as __version__


def _enable_x64() -> None:
    """float64 before any array exists: JAX reads ``JAX_ENABLE_X64`` when it is imported; if
    it already is, its config is updated (what ``import ibflow`` did when it imported JAX)."""
    if "jax" in _sys.modules:
        _sys.modules["jax"].config.update("jax_enable_x64", True)
    else:
        _os.environ["JAX_ENABLE_X64"] = "1"


_enable_x64()

#: XLA:CPU code generation ibflow asks for (`_cpu_codegen`): elementwise and reduction fusions
#: by XLA's own emitters, not YNNPACK (its matrix products stay). A YNNPACK fusion is a library
#: call handed to a thread pool, ~15–25 µs per call, and ibflow's loops run thousands of small
#: ones: a Tsit5 step of a width-2048 mirror flow took 179 µs alone, 104 µs with this flag; the
#: Figure 7.1 sweep 0.168 → 0.135 s warm (medians of 7, the 2-core CPU, 2026-11-29).
CPU_CODEGEN_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce,-eltwise"
#: jaxlib versions whose XLA knows that flag (an unknown flag in XLA_FLAGS aborts the process).
CPU_CODEGEN_JAXLIB = ("0.10.",)


def _cpu_codegen() -> None:
    """Add `CPU_CODEGEN_FLAG` to ``XLA_FLAGS`` for this process, which XLA reads when JAX first
    starts a backend (no effect if one was started before ``import ibflow``). Not where the
    user's ``XLA_FLAGS`` set the same option already, nor with ``IBFLOW_XLA_FLAGS=0``, nor for
    a jaxlib outside `CPU_CODEGEN_JAXLIB` (tested versions only)."""
    from importlib import metadata

    flags = _os.environ.get("XLA_FLAGS", "")
    if (_os.environ.get("IBFLOW_XLA_FLAGS", "1") == "0"
            or "xla_cpu_experimental_ynn_fusion_type" in flags):
        return
    try:
        jaxlib = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return
    if jaxlib.startswith(CPU_CODEGEN_JAXLIB):
        _os.environ["XLA_FLAGS"] = f"{flags} {CPU_CODEGEN_FLAG}".strip()


_cpu_codegen()

#: The public API: each name and the private module that defines it, imported on first
#: access (PEP 562), so that `import ibflow` and the command line's --help need no JAX.
_EXPORTS: dict[str, tuple[str, ...]] = {
    # Models and their capabilities
    "._models.base": (
        "AbstractLinearModel", "AbstractImplicitBiasModel", "AbstractInvariantModel",
        "AbstractMetricFieldModel", "AbstractModel", "AbstractPredictorModel",
        "AbstractReducibleModel",
    ),
    "._models.diagonal": ("DiagonalNet",),
    "._models.fully_connected": ("FullyConnectedNet",),
    "._models.leaky_neuron": ("LeakyReLUNeuron",),
    "._models.linear": ("LinearModel",),
    "._models.two_layer": ("TwoLayerNet",),
    "._models.mlp": ("MLP",),
    "._activations.base": ("AbstractActivation", "AbstractPiecewiseLinearActivation"),
    "._activations.relu": ("Absolute", "Identity", "LeakyReLU", "ReLU"),
    "._activations.smooth": ("FunctionActivation", "Softplus", "Tanh"),
    "._models.shallow": ("AbstractBiasDistribution", "GaussianBias", "ShallowNet", "UniformBias"),
    "._models.classifier": ("TwoLayerClassifier",),
    "._models.cost": ("AbstractCostEstimate",),
    # Losses
    "._losses": (
        "AbstractLoss", "AbstractSquareLoss", "ExponentialLoss", "LogisticLoss", "SquareLoss",
    ),
    # Flows and mirror potentials
    "._flows.base": ("AbstractFlow", "AbstractLossClockFlow"),
    "._flows.gradient": ("GradientFlow",),
    "._flows.mirror": ("MirrorFlow",),
    "._flows.warped": ("WarpedFlow",),
    "._flows.loss_clock": ("LossClock",),
    "._potentials.base": ("AbstractPotential",),
    "._potentials.cosh": ("CoshPotential",),
    "._potentials.cubic": ("CubicPotential",),
    "._potentials.function": ("FunctionPotential",),
    "._potentials.mixture": ("MixturePotential",),
    "._potentials.polynomial": ("PolynomialPotential",),
    "._potentials.quadratic": ("QuadraticPotential",),
    "._potentials.quartic": ("QuarticPotential",),
    "._potentials.scaling": ("AbstractScaling", "Unscaled", "WidthScaled"),
    # The engine: integrate, formulations, one result and one status
    "._integrate": ("integrate",),
    "._formulation": ("AbstractFormulation", "ParameterSpace", "PreferReduction", "Reduction"),
    "._solution": ("Solution", "Trajectory"),
    "._kinks.mode": ("EVENT_KINDS", "KinkReport"),
    "._tail.equilibrium": ("EquilibriumNewton",),
    "._tail.base": ("AbstractTail",),
    "._result": ("AbstractResult",),
    "._status": ("Status",),
    "._errors": ("FlowError",),
    "._certify": ("Certificate", "certify"),
    # Discrete descent (Optax) for comparison
    "._discrete": ("DescentResult", "descend", "mirror_descent"),
    "._classification.descent": ("gradient_descent",),
    # Theory: regularizers, exact minimizer, Hessian-map test, NTK, interpolants
    "._interpolants": ("min_l1_interpolant", "min_l2_interpolant"),
    "._theory.metrics": (
        "AbstractInverseMetricField", "DiagonalInverseMetric", "NeuronInverseMetric",
    ),
    "._theory.hessian_map": (
        "HessianMapAsymmetry", "hessian_map_asymmetry", "inverse_metric_field",
        "predictor_inverse_metric", "predictor_jacobian",
    ),
    "._theory.ntk": (
        "ntk_outputs", "ntk_predictor", "ntk_rkhs_norm", "output_jacobian", "tangent_kernel",
    ),
    "._theory.implicit_bias": ("implicit_bias",),
    "._theory.minimizer": ("RegularizerMinimum", "minimize_regularizer"),
    "._theory.regularizers.base": (
        "AbstractLegendreRegularizer", "AbstractLinearProgramRegularizer", "AbstractRegularizer",
        "NoExactRegularizer",
    ),
    "._theory.regularizers.diagonal": ("DiagonalNetRegularizer",),
    "._theory.regularizers.l1": ("L1Norm",),
    "._theory.regularizers.leaky_neuron": ("LeakyNeuronRegularizer",),
    "._theory.regularizers.quadratic": ("L2Norm", "WeightedL2Norm"),
    "._theory.regularizers.single_neuron": ("SingleNeuronRegularizer",),
    # Mirror-flow variational problems
    "._variational.abs": ("abs_variational",),
    "._variational.relu": ("relu_variational",),
    "._variational.solution": ("VariationalSolution",),
    # Classification: flow in the loss clock and diagnostics
    "._classification.diagnostics": (
        "ClassifierDiagnostics", "KKTResidual", "classifier_diagnostics", "kkt_residual",
        "kkt_residuals", "normalized_margins", "stable_rank", "trajectory_diagnostics",
    ),
    "._classification.flow": ("classification_flow",),
    # Sweeps
    "._sweep.grid": ("Grid",),
    "._sweep.order": ("AbstractOrder", "CostOrder", "GridOrder"),
    "._sweep.result": ("SweepResult", "open_sweep"),
    "._sweep.sweep": ("sweep",),
    # Differentiable limits
    "._differentiable.implicit": ("differentiable_minimize",),
    "._differentiable.limit": ("LimitPoint", "limit_point"),
    "._differentiable.optimize_shape": ("ShapeOptimization", "optimize_shape"),
    "._differentiable.through_solve": ("solve_limit",),
}

_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = ["FlowError", "__version__", "data", *sorted(set(_WHERE) - {"FlowError"})]
_loaded = False


def _load_jax() -> None:
    """First use of a JAX-using name: float64 (again: the user may have turned it off) and the
    persistent compilation cache (`ibflow._cache`), before anything of ibflow compiles."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import jax

    jax.config.update("jax_enable_x64", True)
    from ._cache import enable_compilation_cache

    enable_compilation_cache()


def __getattr__(name):
    import importlib.util

    if name in _WHERE:
        _load_jax()
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value  # later accesses are plain attribute reads
        return value
    # A subpackage (ibflow.data) or a private module (ibflow._formulation), as before the
    # imports were lazy.
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}"):
        _load_jax()
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'ibflow' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
