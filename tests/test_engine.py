"""The one engine: every model and every flow through `jit`, `vmap` (against a loop) and `grad`
(against finite differences); a plain Equinox module against a closed form; honest options and
statuses."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow

from .helpers import PlainLinear, every_flow, every_model

MODELS = every_model(jax.random.key(0))
FLOWS = every_flow()
T_PATH = 0.5  # a clock value on the path, before any member stops


def _scaled(model, k):
    """The initialization scaled by k. Fixed (untrained, ``stop_gradient``-wrapped) leaves stay
    as they are: a slope γ, and the classifier's second layer unless it is trained."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    scaled = eqx.combine(jax.tree_util.tree_map(lambda a: k * a, params), static)
    fixed = [name for name in ("slope",) if hasattr(model, name)]
    if getattr(model, "train_second", True) is False:
        fixed.append("second")
    for name in fixed:
        scaled = eqx.tree_at(lambda m, name=name: getattr(m, name), scaled, getattr(model, name))
    return scaled


def _check_transforms(model, X, y, parameter_atol=1e-9, **options):
    """jit(vmap) over two initializations == a Python loop; d/dk of the path at a fixed clock
    (through the solve) == central finite differences."""
    options = dict(rtol=1e-10, atol=1e-12, throw=False, save_at=jnp.array([T_PATH]), **options)
    factors = jnp.array([1.0, 1.05])

    def run(k):
        return ibflow.integrate(_scaled(model, k), X, y, **options)

    loop = [run(k) for k in factors]
    for sol in loop:
        assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    batched = eqx.filter_jit(eqx.filter_vmap(run))(factors)
    for i, sol in enumerate(loop):
        # Batched matmuls round differently, so the adaptive controller may take a few other
        # steps; the path agrees to the tolerance.
        assert abs(int(batched.steps[i]) - int(sol.steps)) <= 0.1 * int(sol.steps)
        assert int(batched.status._value[i]) == int(sol.status._value)
        # Final losses sit at round-off level (~1e-25): batched matmuls move them by ~1e-26.
        np.testing.assert_allclose(batched.loss[i], sol.loss, rtol=1e-9,
                                   atol=float(sol.target_loss))
        for a, b in zip(jax.tree_util.tree_leaves(eqx.filter(sol.model, eqx.is_inexact_array)),
                        jax.tree_util.tree_leaves(eqx.filter(batched.model,
                                                             eqx.is_inexact_array))):
            np.testing.assert_allclose(b[i], a, rtol=1e-7, atol=parameter_atol)

    weights = jax.random.normal(jax.random.key(3), (X.shape[0],))

    def objective(k):
        path = run(k).trajectory.models
        return jnp.dot(weights, jax.vmap(jax.vmap(path.__class__.__call__, (None, 0)),
                                         (0, None))(path, X)[0])

    grad = float(jax.grad(objective)(1.0))
    h = 1e-5
    fd = (float(objective(1.0 + h)) - float(objective(1.0 - h))) / (2 * h)
    assert abs(grad - fd) <= 1e-4 * max(1.0, abs(fd)), (grad, fd)


#: Models whose check runs the default two-phase solve (explicit phase, then the implicit tail):
#: both reductions (the diagonal net's dense closed-form Jacobian, the classifier's span
#: coordinates) and one parameter-space network (Woodbury tail). The other parameter-space
#: models, the researcher's plain module included, share that tail code exactly (only the
#: vector field, which the explicit phase exercises, differs), so their checks run the explicit
#: phase alone: the tail roughly doubles each check's compile time (three programs per model).
#: The plain module's default two-phase solve is checked against its closed form below; the
#: tail under vmap and grad also by tests/test_differentiable.py and tests/test_sweep.py.
WITH_TAIL = {"diagonal", "classifier", "two-layer-tanh"}

#: The flow each model runs under. Every model and every flow is checked once: the flows other
#: than gradient flow differ only in the vector field (a preconditioner, a speed, a clock),
#: which the explicit phase exercises, so each runs on an explicit-phase model, and no check
#: compiles a program another one already covers.
FLOW_OF = {"linear": "mirror", "fully-connected": "mirror-function-scaled",
           "leaky-neuron": "warped", "plain-module": "loss-clock"}


#: Kinked models whose transform check runs the smooth path (their problems stay away from every
#: kink, see tests/helpers.py). The kink path (`ibflow._kinks`, one generic dynamics for every
#: piecewise-linear model) goes through jit, vmap and grad once, on the leaky neuron under a
#: warped flow; its limits per model are checked in tests/test_kinks.py. Each kinked program
#: costs 25-70 s of compilation here: the depth-3 ReLU MLP's check through its kinks passes but
#: takes 65 s alone (145 s on a loaded worker), so its coupled multipliers are checked under
#: vmap (a batched solve) and grad (the sliding field's derivative) in tests/test_mlp_kinks.py.
SMOOTH_PATH = {"shallow-relu", "two-layer-relu", "mlp-relu-depth3"}


def test_every_model_and_every_flow_is_checked():
    assert set(FLOW_OF) <= set(MODELS) and set(FLOW_OF) & WITH_TAIL == set()
    assert set(FLOW_OF.values()) | {"gradient"} == set(FLOWS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_and_flow_under_jit_vmap_grad(name):
    model, X, y, loss, target = MODELS[name]
    flow = FLOWS[FLOW_OF.get(name, "gradient")]
    if name in WITH_TAIL:
        # The classifier stops on the path (loss 0.2) at the end of the first step below it.
        # Where that step ends moves with round-off: at rtol 1e-10 an error estimate is ~1e-10
        # of the state, so a last-bit difference in the stages (batched products, summation
        # order) moves it by ~1e-6 relative and the next step size by ~2e-7. Measured: the
        # stopping clock 2.4519 moves by up to 4e-7 between the batched and the looped solve
        # (XLA at -O0, as here), the parameters by up to 3.6e-8. Its slope γ = 1 has no kink,
        # so its reduction runs as a smooth field (through the kink machinery the check
        # compiles ~4× longer for the same flow: 94 s).
        atol = 1e-7 if name == "classifier" else 1e-9
        formulation = ibflow.PreferReduction(kinks=name != "classifier")
        _check_transforms(model, X, y, loss=loss, target_loss=target, parameter_atol=atol,
                          flow=flow, formulation=formulation)
    else:
        formulation = ibflow.ParameterSpace(kinks=name not in SMOOTH_PATH)
        _check_explicit_phase(model, X, y, loss=loss, flow=flow, formulation=formulation)


def _check_explicit_phase(model, X, y, **options):
    """`_check_transforms` with the explicit phase alone (``stiff_solver=None``). Tsit5 cannot
    follow the stiff tail to the default 1e-24 target, so it stops at 1e-12 of the zero
    predictor's loss, ~1e-6 (relative) from the limit: batched round-off moves that stopping
    point by ~1e-8, hence the parameter tolerance."""
    target = 1e-12 * 0.5 * float(jnp.mean(y**2))
    _check_transforms(model, X, y, stiff_solver=None, target_loss=target, parameter_atol=1e-7,
                      **options)


def test_plain_equinox_module_reaches_the_closed_form_limit(getkey):
    """A module written here (no ibflow base class, no invariants): gradient flow on the square
    loss keeps θ − θ₀ in the row space of A = [X, 1], so its limit is the projection
    θ₀ + A⁺(y − Aθ₀) (numpy's pseudo-inverse as the independent reference)."""
    X = jax.random.normal(getkey(), (6, 10))
    y = jax.random.normal(getkey(), (6,))
    model = PlainLinear(jax.random.normal(getkey(), (10,)), jnp.array(0.5))
    sol = ibflow.integrate(model, X, y)
    A = np.concatenate([np.asarray(X), np.ones((6, 1))], axis=1)
    theta0 = np.concatenate([np.asarray(model.w), [0.5]])
    expected = theta0 + np.linalg.pinv(A) @ (np.asarray(y) - A @ theta0)
    got = np.concatenate([np.asarray(sol.model.w), [float(sol.model.c)]])
    assert np.linalg.norm(got - expected) <= 1e-10 * np.linalg.norm(expected)
    assert sol.predictor is None and sol.trajectory is None


@pytest.mark.parametrize("option, value", [
    ("rtol", 0.0), ("rtol", -1.0), ("rtol", float("nan")), ("atol", -1e-3),
    ("t_max", -1.0), ("t_max", 0.0), ("dt0", 0.0), ("dt0", -1e-3),
    ("target_loss", -1.0), ("target_loss", float("inf")), ("stiff_switch", 0.0),
    ("max_steps", 0), ("max_steps", 2.5), ("max_steps", True), ("rtol", "tight"),
    ("rtol", 1e-6 + 1e-6j), ("solver", "Tsit5"), ("stiff_solver", "fast"),
    ("adjoint", None), ("formulation", "parameters"), ("flow", 1.0),
    ("loss", "square"), ("save_at", []), ("throw", "no"),
])
def test_every_invalid_option_is_refused_by_name(option, value):
    model, X, y, *_ = MODELS["linear"]
    with pytest.raises(ValueError, match=option):
        ibflow.integrate(model, X, y, **{option: value})


def test_model_that_is_not_a_module_or_mismatched_is_refused():
    _, X, y, *_ = MODELS["linear"]
    with pytest.raises(ValueError, match="model"):
        ibflow.integrate(lambda x: x.sum(), X, y)
    with pytest.raises(ValueError, match="model"):
        ibflow.integrate(PlainLinear(jnp.zeros(7), jnp.array(0.0)), X, y)


# (rtol, target relative to mean(y²)/2, stiff_switch, max_steps, t_max (None: no time
# budget), dt0, stiff solver)
BATTERY = [
    (1e-10, 1e-24, 1e-8, 100_000, None, None, "auto"),
    (1e-6, 1e-24, 1e-8, 100_000, None, None, "auto"),
    (1e-10, 1e-30, 1e-8, 100_000, None, None, "auto"),
    (1e-10, 1e-24, 1e-30, 100_000, None, None, "auto"),
    (1e-10, 1e-24, 1e2, 100_000, None, None, "auto"),
    (1e-10, 1e-24, 1e-8, 5, None, None, "auto"),
    (1e-10, 1e-24, 1e-8, 1, None, None, "auto"),
    (1e-10, 1e-24, 1e-8, 100_000, 1e-3, None, "auto"),
    (1e-10, 1e-24, 1e-8, 100_000, None, 1e-12, "auto"),
    (1e-10, 1e-24, 1e-8, 100_000, None, 10.0, "auto"),
    (1e-10, 1e-24, 1e-8, 100_000, None, None, None),
    (1e-10, 1e-12, 1e-8, 100_000, None, None, None),
    (1e-3, 1e-24, 1e-8, 100_000, None, None, "auto"),
    (1e-10, 0.0, 1e-8, 2_000, None, None, "auto"),
    (1e-10, 1e-2, 1e-8, 100_000, None, None, "auto"),
    (1e-10, 1e3, 1e-8, 100_000, None, None, "auto"),
    (1e-12, 1e-24, 1e-8, 100_000, None, None, "auto"),
    (1e-10, 1e-24, 1e-8, 60, None, None, "auto"),
    (1e-10, 1e-24, 1e-8, 300, None, None, None),
    (1e-8, 1e-26, 1e-10, 100_000, 1e3, 1e-6, "auto"),
    (1e-10, 1e-24, 1e-8, 100_000, None, 1e-30, None),
    (1e-10, 1e-24, 0.5, 100_000, None, None, "auto"),
]


# The diagonal net (reduced dynamics, Newton tail) runs the whole battery; the fully connected
# net (parameter ODE, Kvaerno5 tail) every third combination (each new `max_steps` or solver
# compiles another program).
@pytest.mark.parametrize("model_name, battery", [("diagonal", BATTERY),
                                                 ("fully-connected", BATTERY[::3])])
def test_status_is_converged_exactly_when_the_loss_reached_its_target(model_name, battery):
    """Issue 11: over a battery of option combinations (budgets that run out, horizons that
    end early, targets 0, tiny and huge, switch levels below the target…) the status is
    `converged` if and only if the returned model's loss (recomputed here) is ≤ the target, and
    `steps` never exceeds `max_steps`."""
    model, X, y, *_ = MODELS[model_name]
    scale = 0.5 * float(jnp.mean(y**2))
    seen = set()
    for rtol, target, switch, max_steps, t_max, dt0, stiff in battery:
        sol = ibflow.integrate(model, X, y, rtol=rtol, target_loss=target * scale,
                               stiff_switch=switch, max_steps=max_steps, t_max=t_max, dt0=dt0,
                               stiff_solver=stiff, throw=False)
        loss = 0.5 * float(jnp.mean((jax.vmap(sol.model)(X) - y) ** 2))
        # Same formula, other summation order: equal up to the residual's round-off.
        np.testing.assert_allclose(float(sol.loss), loss, rtol=1e-5, atol=1e-28)
        # Residuals computed from outputs of size ~sqrt(scale) carry ~eps·sqrt(scale) of
        # round-off, so the loss is known to ~eps·sqrt(loss·scale): where the recomputed loss
        # lies that close to the target (the 1e-30 target: residuals at the outputs' last
        # bits), it cannot tell the side, and the verdict must agree with the loss returned.
        band = 64 * np.finfo(float).eps * (loss + np.sqrt(loss * scale))
        judged = loss if abs(loss - target * scale) > band else float(sol.loss)
        assert bool(sol.converged) == (judged <= target * scale), (
            rtol, target, switch, max_steps)
        assert int(sol.steps) <= max_steps
        assert int(sol.accepted_steps) <= int(sol.steps)
        seen.add(ibflow.Status[sol.status])
    assert len(seen) >= 2  # the battery exercises converged and non-converged outcomes
