"""The Newton tail of flows with one attracting equilibrium (`ibflow.EquilibriumNewton`), checked
against the implicit Runge–Kutta tail (a second algorithm that integrates the path), the
diagonal net's 4d-parameter ODE (no reduction involved) and finite differences."""

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow._tail.equilibrium import DEFAULT_NEWTON_SWITCH

from .helpers import random_problem, relative


def _problem(getkey, n=10, d=50):
    return random_problem(getkey(), n=n, d=d)


@pytest.mark.parametrize("scale, shape", [(1e-4, 0.0), (1e-2, 0.5), (0.3, 0.9)])
def test_newton_tail_limit_equals_the_integrated_tail(getkey, scale, shape):
    X, y = _problem(getkey)
    model = ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=X.shape[1])
    newton = ibflow.integrate(model, X, y)  # "auto": Newton for the reduction
    integrated = ibflow.integrate(model, X, y, stiff_solver=dfx.Kvaerno5(), rtol=1e-12,
                                  atol=1e-16)
    assert newton.status == ibflow.Status.converged
    assert float(newton.loss) <= float(newton.target_loss)
    assert relative(newton.predictor, integrated.predictor) <= 1e-10
    # The Newton iterations are few: the switch leaves the state in Newton's quadratic basin.
    assert int(newton.steps) < int(integrated.steps)


def test_chord_steps_reach_the_same_limit_with_fewer_jacobians(getkey):
    """Chord steps (reusing a factorization) change how the root is reached, not the root:
    with none, one and the default (up to four) the limits agree to 1e-10, and the
    factorization count does not grow with more chords."""
    X, y = _problem(getkey, n=20, d=60)
    model = ibflow.DiagonalNet.from_scale_shape(1e-4, 0.3, dim=X.shape[1])
    sols = [ibflow.integrate(model, X, y, stiff_solver=ibflow.EquilibriumNewton(max_chords=k))
            for k in (0, 1, ibflow.EquilibriumNewton().max_chords)]
    for sol in sols:
        assert sol.status == ibflow.Status.converged
        assert relative(sol.predictor, sols[0].predictor) <= 1e-10
    steps = [int(sol.steps) for sol in sols]
    assert steps[2] <= steps[1] <= steps[0], steps
    assert steps[2] < steps[0], steps
    for bad in ({"max_chords": -1}, {"max_chords": 1.5}, {"max_iterations": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ibflow.EquilibriumNewton(**bad)


def test_newton_tail_limit_equals_the_parameter_ode(getkey):
    """Through the 4d parameters (no closed form, no Newton) the flow reaches the same limit."""
    X, y = _problem(getkey, n=8, d=30)
    model = ibflow.DiagonalNet.from_scale_shape(0.05, 0.3, dim=30)
    newton = ibflow.integrate(model, X, y)
    parameters = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace())
    assert parameters.status == ibflow.Status.converged
    assert relative(newton.predictor, parameters.predictor) <= 1e-10


def test_newton_tail_under_vmap_equals_a_loop(getkey):
    X, y = _problem(getkey)
    scales = jnp.array([1e-3, 3e-2, 0.5])

    def run(a):
        model = ibflow.DiagonalNet.from_scale_shape(a, 0.2, dim=X.shape[1])
        return ibflow.integrate(model, X, y, throw=False)

    batched = eqx.filter_jit(jax.vmap(run))(scales)
    for i, a in enumerate(scales):
        sol = run(a)
        assert int(batched.status._value[i]) == int(ibflow.Status.converged._value)
        np.testing.assert_allclose(batched.predictor[i], sol.predictor, rtol=1e-10, atol=1e-13)


def test_gradient_through_the_newton_tail_matches_finite_differences(getkey):
    X, y = _problem(getkey)
    weights = jax.random.normal(getkey(), (X.shape[1],))

    def objective(log_scale):
        model = ibflow.DiagonalNet.from_scale_shape(jnp.exp(log_scale), 0.4, dim=X.shape[1])
        return jnp.dot(weights, ibflow.integrate(model, X, y).predictor)

    x0, h = jnp.log(1e-2), 1e-5
    grad = float(jax.grad(objective)(x0))
    fd = (float(objective(x0 + h)) - float(objective(x0 - h))) / (2 * h)
    assert abs(grad - fd) <= 1e-6 * max(1.0, abs(fd)), (grad, fd)


def test_target_below_roundoff_stalls_honestly(getkey):
    """Target 0 cannot be reached in floating point: Newton finds no decrease at the round-off
    floor and says so (`stalled`), after a few iterations, never `converged`."""
    X, y = _problem(getkey)
    model = ibflow.DiagonalNet.from_scale_shape(1e-2, 0.0, dim=X.shape[1])
    sol = ibflow.integrate(model, X, y, target_loss=0.0, throw=False,
                           stiff_solver=ibflow.EquilibriumNewton())
    assert sol.status == ibflow.Status.stalled, ibflow.Status[sol.status]
    assert float(sol.loss) < 1e-26
    assert int(sol.steps) < 2_000


def test_newton_tail_is_refused_where_it_does_not_apply(getkey):
    X, y = _problem(getkey)
    fc = ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.2, dim=X.shape[1], key=getkey())
    with pytest.raises(ValueError, match="stiff_solver"):
        ibflow.integrate(fc, X, y, stiff_solver=ibflow.EquilibriumNewton())
    diagonal = ibflow.DiagonalNet.from_scale_shape(1e-2, 0.0, dim=X.shape[1])
    with pytest.raises(ValueError, match="save_at"):
        ibflow.integrate(diagonal, X, y, stiff_solver=ibflow.EquilibriumNewton(),
                         save_at=jnp.array([1.0, 2.0]))
    # "auto" with save_at integrates the path (Kvaerno5), so a point after the switch (where
    # the Newton tail would have left the path) is filled, with a loss below the switch level.
    level = 0.1
    # The switch time: when the path's loss reaches the switch level.
    switch = float(ibflow.integrate(diagonal, X, y, stiff_solver=None,
                                    target_loss=level * 0.5 * float(jnp.mean(y**2))).time)
    assert switch > 0.0
    sol = ibflow.integrate(diagonal, X, y, save_at=jnp.array([0.5 * switch, 1.5 * switch]))
    assert bool(jnp.all(jnp.isfinite(sol.trajectory.loss)))
    assert float(sol.trajectory.loss[1]) < level * 0.5 * float(jnp.mean(y**2))
    # By default Newton starts at once (the zero predictor's loss is the switch level, up to
    # round-off) and reaches the limit, which lies at t = ∞.
    assert 1.0 <= DEFAULT_NEWTON_SWITCH <= 1.0 + 1e-8
    assert math.isinf(float(ibflow.integrate(diagonal, X, y).time))


def test_early_stop_target_is_reached_on_the_path(getkey):
    """A target of one's own is met on the path: "auto" then integrates the tail (Kvaerno5), and
    an explicit `EquilibriumNewton` leaves a target above its limit level to the explicit phase;
    both give the path's point, not the limit."""
    X, y = _problem(getkey)
    model = ibflow.DiagonalNet.from_scale_shape(1e-3, 0.0, dim=X.shape[1])
    target = 1e-6 * 0.5 * float(jnp.mean(y**2))  # below the Newton switch level (1)
    early = ibflow.integrate(model, X, y, target_loss=target, rtol=1e-6, atol=1e-10,
                             stiff_solver=ibflow.EquilibriumNewton())
    path = ibflow.integrate(model, X, y, target_loss=target, stiff_solver=None, rtol=1e-6,
                            atol=1e-10)
    assert early.status == ibflow.Status.converged
    assert float(early.loss) > 1e-3 * target  # not polished to the limit
    # The same explicit path in two compiled programs (one with a Newton tail compiled in):
    # the same 74 steps, rounded differently (measured 9.3e-12 apart); the limit is 2.2e-3 away.
    assert relative(early.predictor, path.predictor) <= 1e-10
    auto = ibflow.integrate(model, X, y, target_loss=1e-14 * 0.5 * float(jnp.mean(y**2)))
    limit = ibflow.integrate(model, X, y)
    assert auto.status == ibflow.Status.converged
    assert 1e-9 < relative(auto.predictor, limit.predictor) < 1e-4  # a path point, not the limit


def test_newton_tail_without_an_interpolant_keeps_a_finite_state(getkey):
    """n > d: X Xᵀ is singular and no interpolant exists. The Newton tail cannot reach the
    target; it returns the last finite state (loss = least squares level, > 0) with a status
    that says so, not NaN parameters from the singular implicit-function correction."""
    X = jax.random.normal(getkey(), (12, 6))
    y = jax.random.normal(getkey(), (12,))
    model = ibflow.DiagonalNet.from_scale_shape(0.1, 0.0, dim=6)
    sol = ibflow.integrate(model, X, y, throw=False, max_steps=300)
    assert sol.status != ibflow.Status.converged
    assert bool(jnp.all(jnp.isfinite(sol.predictor))) and float(sol.loss) > 0
    residual = np.linalg.lstsq(np.asarray(X), np.asarray(y), rcond=None)[1][0] / 24
    assert float(sol.loss) >= 0.999 * residual  # not below the least-squares floor


def _reduction(X, y, scale, shape):
    from ibflow._dynamics.diagonal import DiagonalReducedDynamics

    model = ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=X.shape[1])
    return DiagonalReducedDynamics(initial=model, X=X, y=y)


def test_pair_table_newton_matrices_equal_the_vector_fields_jacobian(getkey):
    """Under vmap over enough members sharing X, Newton's matrices come from one product with
    the pair table (`DiagonalReducedDynamics.newton_table`); each equals −∂F/∂ν computed by
    forward-mode differentiation of the vector field (an independent algorithm), and the direct
    build."""
    from ibflow._dynamics.diagonal import PAIR_TABLE_BATCH

    X, y = _problem(getkey, n=7, d=25)
    batch = PAIR_TABLE_BATCH + 3
    scales = jnp.logspace(-3, -0.5, batch)
    shapes = jnp.linspace(-0.6, 0.6, batch)
    states = 0.3 * jax.random.normal(getkey(), (batch, X.shape[0]))

    def matrices(scale, shape, state):
        dynamics = _reduction(X, y, scale, shape)
        table = dynamics.newton_table()
        assert table.shape == (7 * 8 // 2, 25)
        jac = jax.jacfwd(lambda s: dynamics.vector_field(jnp.zeros(()), s, None))(state)
        return dynamics.newton_matrix(state, table), dynamics.newton_matrix(state), -jac

    from_table, direct, reference = jax.jit(jax.vmap(matrices))(scales, shapes, states)
    assert float(jnp.max(jnp.abs(from_table - reference)) / jnp.max(jnp.abs(reference))) <= 1e-13
    assert float(jnp.max(jnp.abs(direct - reference)) / jnp.max(jnp.abs(reference))) <= 1e-13
    assert bool(jnp.all(from_table == jnp.swapaxes(from_table, 1, 2)))  # symmetric by build


def _while_depths(jaxpr, shape, depth=0):
    """The while-loop nesting depths of the equations of `jaxpr` (recursively) with an output of
    `shape`."""
    found = []
    for eqn in jaxpr.eqns:
        if any(getattr(v.aval, "shape", None) == shape for v in eqn.outvars):
            found.append(depth)
        inner = depth + (eqn.primitive.name == "while")
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    found += _while_depths(sub.jaxpr, shape, inner)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    found += _while_depths(sub, shape, inner)
    return found


def test_pair_table_is_built_once_per_batch_outside_the_newton_loop(getkey):
    """Built from the unbatched X, the table stays unbatched under vmap (one per call, not one
    per member) and is built before the Newton loop, not in it; its one use is the product
    with the members' slopes."""
    from ibflow._dynamics.diagonal import PAIR_TABLE_BATCH

    X, y = _problem(getkey, n=6, d=40)

    def one(scale):
        model = ibflow.DiagonalNet.from_scale_shape(scale, 0.2, dim=X.shape[1])
        return ibflow.integrate(model, X, y, throw=False).predictor

    scales = jnp.logspace(-3, -1, PAIR_TABLE_BATCH)
    jaxpr = jax.make_jaxpr(jax.vmap(one))(scales)
    table = (6 * 7 // 2, 40)
    built = _while_depths(jaxpr.jaxpr, table)
    assert built and set(built) == {0}, built  # at the top level only: no while loop rebuilds it
    assert not _while_depths(jaxpr.jaxpr, (PAIR_TABLE_BATCH,) + table)  # never per member
    batched = jax.vmap(one)(scales)
    looped = jnp.stack([one(s) for s in scales])
    assert relative(batched, looped) <= 1e-12
