"""No two batched LAPACK calls at once: jaxlib 0.10.2's CPU kernels can deadlock then
(`ibflow._lapack`)."""

import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow._kinks.equivalent_control import _regular
from tests.lapack_audit import concurrent_lapack_calls


def test_the_audit_finds_two_independent_solves_and_not_two_in_sequence():
    """The audit itself: two solves of unrelated systems may run at once, a solve whose
    right-hand side is another's solution may not."""
    a = jnp.eye(3) + 0.1
    b = jnp.ones(3)

    def independent(a, b):
        return jnp.linalg.solve(a, b), jnp.linalg.solve(a + 1.0, b)

    def chained(a, b):
        return jnp.linalg.solve(a + 1.0, jnp.linalg.solve(a, b))

    def count(fn):
        return len(concurrent_lapack_calls(jax.jit(fn).lower(a, b).compiler_ir("stablehlo")))

    assert count(independent) > 0
    assert count(chained) == 0


# The programs a user compiles, by kind: a kinked flow whose tail differentiates the multiplier
# solve (the exact dense Jacobian), a deep net's coupled multiplier system, the classifier's
# reduction, and the flagship's Newton tail and Theorem-1 minimizer over a vmapped grid.
KINKED = ("leaky", "mlp-relu", "classifier")


@pytest.mark.slow
@pytest.mark.parametrize("case", KINKED)
def test_a_kinked_flow_runs_its_lapack_calls_one_at_a_time(case):
    from benchmarks.compile import CASES

    model, X, y, kwargs = CASES[case].build()
    solve = eqx.filter_jit(lambda m, X, y: ibflow.integrate(m, X, y, throw=False, **kwargs))
    module = solve.lower(model, X, y).lowered.compiler_ir("stablehlo")
    assert concurrent_lapack_calls(module) == []


def test_a_vmapped_grid_of_diagonal_flows_or_minimizers_runs_its_lapack_calls_one_at_a_time():
    """The flagship's programs: the Newton tail of the diagonal net's flow, and Theorem 1's
    minimizer (its Newton direction and its fallback in the metric ``XXᵀ`` were two
    independent Cholesky solves per iteration), each over a vmapped grid of 32 members."""
    data = ibflow.data.sparse_regression(jax.random.key(0), n=12, d=40)

    def model(scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=40)

    def limit(scale, shape):
        return ibflow.integrate(model(scale, shape), data.X, data.y, throw=False).predictor

    def minimizer(scale, shape):
        return ibflow.minimize_regularizer(ibflow.implicit_bias(model(scale, shape)), data.X,
                                           data.y, throw=False).w

    grid = (jnp.geomspace(1e-4, 1.0, 32), jnp.linspace(0.0, 0.9, 32))
    for program in (limit, minimizer):
        module = jax.jit(jax.vmap(program)).lower(*grid).compiler_ir("stablehlo")
        assert concurrent_lapack_calls(module) == [], program.__name__


def test_the_multiplier_solve_of_a_large_batch_finishes_and_is_exact():
    """2 560 systems of 10 × 10 (a vmapped sweep of 256 ReLU students with 10 neurons each):
    with the right-hand side and the identity in two `lu_solve` calls, this program hung at 0 %
    CPU every time on the project's 2-core machine. In a child process, so that a hang fails
    this test instead of the run; checked against numpy."""
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        import ibflow
        from ibflow._kinks.equivalent_control import _regular
        rng = np.random.default_rng(0)
        system = rng.normal(size=(2560, 10, 10)) + 4 * np.eye(10)
        rhs = rng.normal(size=(2560, 10))
        solve = jax.jit(_regular)
        for _ in range(100):
            u, diagonal, small = jax.block_until_ready(solve(system, rhs))
        inverse = np.linalg.inv(system)
        print(np.max(np.abs(u - np.linalg.solve(system, rhs[..., None])[..., 0])),
              np.max(np.abs(diagonal - np.diagonal(inverse, axis1=-2, axis2=-1))),
              bool(np.any(small)))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=True).stdout.split()
    except subprocess.TimeoutExpired:
        pytest.fail("the batched multiplier solve did not finish in 300 s (a LAPACK deadlock)")
    assert float(out[0]) < 1e-12 and float(out[1]) < 1e-12 and out[2] == "False"


def test_the_multiplier_solve_differentiates_as_the_implicit_function():
    """`_regular`'s own JVP (from the inverse at hand) against central differences of numpy's
    solve and inverse, in the system and in the right-hand side."""
    rng = np.random.default_rng(1)
    system = rng.normal(size=(3, 5, 5)) + 3 * np.eye(5)
    rhs = rng.normal(size=(3, 5))
    d_system, d_rhs = rng.normal(size=system.shape), rng.normal(size=rhs.shape)
    for diagonal in (True, False):
        _, (du, d_diag, _) = jax.jvp(lambda s, r, diagonal=diagonal: _regular(s, r, diagonal),
                                     (system, rhs), (d_system, d_rhs))

        def numpy(h):
            s, r = system + h * d_system, rhs + h * d_rhs
            return (np.linalg.solve(s, r[..., None])[..., 0],
                    np.diagonal(np.linalg.inv(s), axis1=-2, axis2=-1))

        h = 1e-6
        (u1, i1), (u0, i0) = numpy(h), numpy(-h)
        np.testing.assert_allclose(du, (u1 - u0) / (2 * h), rtol=1e-7, atol=1e-9)
        if diagonal:
            np.testing.assert_allclose(d_diag, (i1 - i0) / (2 * h), rtol=1e-7, atol=1e-9)
        else:
            assert d_diag is None
