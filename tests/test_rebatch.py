"""The sweep executor's two passes (`ibflow._sweep.executor.Executor.run`): a chunk runs first
with a small step budget, and the members that exhaust it run again, from the start and with
the sweep's own budget, in a smaller batch. Checked against each member integrated alone
(``ibflow.integrate``), against the chunk run in one pass (bitwise), and on a member that
exhausts the full budget."""

import jax
import numpy as np
import pytest

import ibflow
from ibflow._status import Status
from ibflow._sweep import executor as E

from .helpers import random_problem

N, D = 8, 30
SCALES = np.logspace(-4, -0.5, 8)
SHAPES = np.array([0.0, 0.6])


def _build(scale, shape):
    return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=D)


def _members():
    scale, shape = np.meshgrid(SCALES, SHAPES, indexing="ij")
    return {"scale": scale.ravel(), "shape": shape.ravel()}


def _executor(options, **kw):
    sweepable = ("rtol", "atol", "target_loss", "t_max", "stiff_switch", "dt0")
    return E.Executor(_build, options, sweepable, (), (), False, jax.devices()[:1], **kw)


def _run(X, y, options=None, **kw):
    executor = _executor(options or {}, **kw)
    placed = executor.place({"X": np.asarray(X), "y": np.asarray(y)}, {})
    return executor, executor.run(_members(), placed)


def _alone(X, y, **options):
    """Each member integrated alone (no batch, no executor)."""
    members = _members()
    sols = [ibflow.integrate(_build(a, s), X, y, throw=False, **options)
            for a, s in zip(members["scale"], members["shape"])]
    return {"predictor": np.stack([np.asarray(s.predictor) for s in sols]),
            "steps": np.array([int(s.steps) for s in sols]),
            "status": np.array([int(s.status._value) for s in sols]),
            "loss": np.array([float(s.loss) for s in sols])}


@pytest.fixture(scope="module")
def problem():
    return random_problem(jax.random.key(7), n=N, d=D)


@pytest.fixture(scope="module")
def alone(problem):
    return _alone(*problem)


def test_two_passes_equal_members_alone_and_rerun_exactly_the_slow_ones(problem, alone):
    X, y = problem
    first = 5
    slow = alone["steps"] > first
    assert 0 < slow.sum() < slow.size // 2  # the check needs both kinds of member
    executor, out = _run(X, y, first_pass_steps=first, split_min_members=4)
    assert executor.second_pass_counts == [int(slow.sum())]
    np.testing.assert_array_equal(out["status"], alone["status"])
    assert (out["status"] == int(Status.converged._value)).all()
    np.testing.assert_array_equal(out["steps"], alone["steps"])
    for i in range(len(out["steps"])):
        rel = (np.linalg.norm(out["predictor"][i] - alone["predictor"][i])
               / np.linalg.norm(alone["predictor"][i]))
        assert rel <= 1e-10, (i, rel)


def test_members_finished_in_the_first_pass_are_bitwise_those_of_one_pass(problem, alone):
    """A member that finishes within the first budget does not depend on the budget it did not
    reach: its record is the one-pass record, bit for bit (and so are the others here, run
    again in a batch of the chunk's shape)."""
    X, y = problem
    _, one = _run(X, y, first_pass_steps=10**9, split_min_members=4)
    executor, two = _run(X, y, first_pass_steps=3, split_min_members=4)
    assert executor.second_pass_counts[0] > 0
    fast = one["steps"] <= 3
    for k in one:
        np.testing.assert_array_equal(two[k][fast], one[k][fast], err_msg=k)


def test_a_member_that_exhausts_the_full_budget_reports_it(problem, alone):
    """With the sweep's budget below the slowest member's need, that member is run again and
    still ends `budget_exhausted`; the members within the budget converge as alone."""
    X, y = problem
    budget = int(np.max(alone["steps"])) - 1
    limited = _alone(X, y, max_steps=budget)
    exhausted = limited["status"] == int(Status.budget_exhausted._value)
    assert exhausted.any() and not exhausted.all()
    executor, out = _run(X, y, {"max_steps": budget}, first_pass_steps=1, split_min_members=4)
    assert executor.second_pass_counts == [int((alone["steps"] > 1).sum())]
    np.testing.assert_array_equal(out["status"], limited["status"])
    np.testing.assert_array_equal(out["steps"], limited["steps"])
    assert (out["steps"][exhausted] == budget).all()


def test_small_chunks_and_full_budgets_run_in_one_pass(problem, alone):
    X, y = problem
    executor, _ = _run(X, y, first_pass_steps=1, split_min_members=17)  # chunk of 16
    assert executor.second_pass_counts == [0]
    executor, _ = _run(X, y, {"max_steps": 5}, first_pass_steps=5, split_min_members=4)
    assert executor.second_pass_counts == [0]  # the first pass would be the whole budget
    executor, out = _run(X, y, first_pass_steps=1, split_min_members=4, one_pass=True)
    assert executor.second_pass_counts == [0]  # flows through kinks: one pass, as asked
    np.testing.assert_array_equal(out["steps"], alone["steps"])


def test_generic_flow_two_passes_then_one_pass_once_most_members_are_slow(problem):
    """Any model and flow: the explicit Runge–Kutta path (no Newton tail) of the parameter ODE,
    whose members all need hundreds of steps. The first chunk's first pass is exhausted by all,
    they run again in a batch of the chunk's size with the same results as alone, and the
    executor runs later chunks in one pass."""
    X, y = problem
    options = dict(formulation=ibflow.ParameterSpace(), stiff_solver=None, rtol=1e-6,
                   atol=1e-10, target_loss=1e-8)
    executor = _executor(options, first_pass_steps=4, split_min_members=4)
    placed = executor.place({"X": np.asarray(X), "y": np.asarray(y)}, {})
    members = {k: v[:4] for k, v in _members().items()}
    out = executor.run(members, placed)
    assert executor.second_pass_counts == [4]
    again = executor.run(members, placed)
    assert executor.second_pass_counts == [4, 0]
    for k in out:
        np.testing.assert_array_equal(again[k], out[k], err_msg=k)
    for i in range(4):
        sol = ibflow.integrate(_build(members["scale"][i], members["shape"][i]), X, y,
                               throw=False, **options)
        assert int(out["steps"][i]) == int(sol.steps)
        assert out["status"][i] == int(sol.status._value)
        np.testing.assert_allclose(out["loss"][i], float(sol.loss), rtol=1e-8)


@pytest.mark.parametrize("count, size, devices, expected", [
    (1, 16, 1, 1), (2, 16, 1, 4), (4, 16, 1, 4), (5, 16, 1, 16), (16, 16, 1, 16),
    (3, 100, 1, 7), (8, 100, 1, 25), (30, 100, 1, 100), (1, 32, 2, 2), (3, 32, 2, 8),
])
def test_second_batch_sizes_are_few_and_hold_the_members(count, size, devices, expected):
    got = E._second_batch_size(count, size, devices)
    assert got == expected
    assert got >= count and got % devices == 0


def test_bad_split_arguments_are_refused_by_name():
    for kw, name in (({"first_pass_steps": 0}, "first_pass_steps"),
                     ({"first_pass_steps": 2.5}, "first_pass_steps"),
                     ({"split_min_members": 0}, "split_min_members")):
        with pytest.raises(ValueError, match=name):
            _executor({}, **kw)
