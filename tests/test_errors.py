"""``throw=True``: one readable `ibflow.FlowError` outside jit (naming the status, the loss, the
target and the option to change, and carrying the `Solution`); Equinox's runtime error inside a
trace, where no host value exists."""

import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import ibflow


def _problem():
    data = ibflow.data.sparse_regression(jax.random.key(0), n=10, d=40, k=3)
    return ibflow.DiagonalNet.from_scale_shape(0.1, 0.0, dim=40), data.X, data.y


def test_budget_exhausted_raises_flow_error_with_the_solution():
    model, X, y = _problem()
    with pytest.raises(ibflow.FlowError) as info:
        ibflow.integrate(model, X, y, max_steps=1)
    error = info.value
    sol = error.solution
    assert isinstance(sol, ibflow.Solution) and error.status == "budget_exhausted"
    assert sol.status == ibflow.Status.budget_exhausted and int(sol.steps) == 1
    # The same result as throw=False, and the message quotes its numbers and the fix.
    quiet = ibflow.integrate(model, X, y, max_steps=1, throw=False)
    assert float(sol.loss) == float(quiet.loss) > float(quiet.target_loss)
    message = str(error)
    assert message.splitlines() == [message]  # one line
    assert "did not converge: status budget_exhausted" in message
    assert f"loss {float(quiet.loss):.3e}, target_loss {float(quiet.target_loss):.3e}" in message
    assert "after 1 steps" in message and "raise max_steps" in message
    assert "throw=False" in message


def test_nonfinite_status_names_its_own_fix():
    model, X, y = _problem()
    broken = eqx.tree_at(lambda m: m.u_plus, model, jnp.full_like(model.u_plus, jnp.nan))
    with pytest.raises(ibflow.FlowError, match="status nonfinite .*non-finite") as info:
        ibflow.integrate(broken, X, y, formulation=ibflow.ParameterSpace())
    assert info.value.solution.status == ibflow.Status.nonfinite


def test_converged_flow_does_not_raise():
    model, X, y = _problem()
    sol = ibflow.integrate(model, X, y)
    assert sol.status == ibflow.Status.converged


def test_inside_jit_and_vmap_the_error_stays_equinox_runtime_error():
    model, X, y = _problem()
    run = jax.jit(lambda m: ibflow.integrate(m, X, y, max_steps=1).loss)
    with pytest.raises(Exception, match="did not converge") as info:
        jax.block_until_ready(run(model))
    assert not isinstance(info.value, ibflow.FlowError)
    models = eqx.filter_vmap(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.0, dim=40))(
        jnp.array([0.1, 0.2]))
    with pytest.raises(Exception, match="did not converge") as info:
        jax.block_until_ready(eqx.filter_vmap(
            lambda m: ibflow.integrate(m, X, y, max_steps=1).loss)(models))
    assert not isinstance(info.value, ibflow.FlowError)


def test_a_script_that_runs_out_of_budget_prints_a_short_traceback(tmp_path):
    """The issue's case: default throw=True outside jit, as a user's script sees it (the old
    runtime error printed 42 lines with the message buried)."""
    script = tmp_path / "flow.py"
    script.write_text(
        "import jax, ibflow\n"
        "data = ibflow.data.sparse_regression(jax.random.key(0), n=10, d=40, k=3)\n"
        "model = ibflow.DiagonalNet.from_scale_shape(0.1, 0.0, dim=40)\n"
        "ibflow.integrate(model, data.X, data.y, max_steps=1)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 30, proc.stderr
    assert lines[-1].startswith("ibflow.FlowError: the flow did not converge: status "
                                "budget_exhausted")
