"""No two batched LAPACK calls at once: jaxlib 0.10.2's CPU kernels can deadlock then
(`ibflow._lapack`)."""

import functools
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow._kinks.equivalent_control import _minimal_norm, _solves
from ibflow._lapack import after, largest_batched_lapack_call
from tests.lapack_audit import concurrent_lapack_calls


def test_the_audit_finds_two_independent_solves_and_not_two_in_sequence():
    """The audit itself: two solves of unrelated systems may run at once, also when an
    ``optimization_barrier`` groups the first's result with the second's matrix (it orders
    nothing at run time); a solve whose right-hand side is another's solution may not, nor
    one whose matrix is passed through `after` the other's solution."""
    a = jnp.eye(3) + 0.1
    b = jnp.ones(3)

    def independent(a, b):
        return jnp.linalg.solve(a, b), jnp.linalg.solve(a + 1.0, b)

    def barrier(a, b):
        first = jnp.linalg.solve(a, b)
        _, second = jax.lax.optimization_barrier((first, a + 1.0))
        return first, jnp.linalg.solve(second, b)

    def chained(a, b):
        return jnp.linalg.solve(a + 1.0, jnp.linalg.solve(a, b))

    def ordered(a, b):
        first = jnp.linalg.solve(a, b)
        return first, jnp.linalg.solve(after(first, a + 1.0), b)

    def count(fn):
        return len(concurrent_lapack_calls(jax.jit(fn).lower(a, b).compiler_ir("stablehlo")))

    assert count(independent) > 0
    assert count(barrier) > 0
    assert count(chained) == 0
    assert count(ordered) == 0


def test_a_lax_map_remainder_runs_beside_its_scan():
    """docs/guarantees.md: ``jax.lax.map`` with a `batch_size` that does not divide the length
    solves the remainder beside the scan (two LAPACK calls XLA may run at once); with no
    remainder the solves stay in the scan, one group after another."""

    def grouped(matrices, rhs):
        return jax.lax.map(lambda pair: jnp.linalg.solve(*pair), (matrices, rhs), batch_size=4)

    def count(members):
        matrices = jnp.broadcast_to(jnp.eye(3) + 0.1, (members, 3, 3))
        rhs = jnp.ones((members, 3))
        return len(concurrent_lapack_calls(
            jax.jit(grouped).lower(matrices, rhs).compiler_ir("stablehlo")))

    assert count(10) > 0
    assert count(8) == 0


def test_after_is_the_identity_and_carries_no_derivative():
    """`after` changes no value (−0, ±inf and NaN included, whatever `done` holds: NaN, inf,
    integers, booleans) and no derivative, under jit, vmap and grad."""
    value = {"x": jnp.array([-0.0, 0.0, 1.5, -jnp.inf, jnp.nan]), "k": jnp.arange(3),
             "b": jnp.array([True, False])}
    for done in (jnp.array([jnp.nan, 1.0]), jnp.array([jnp.inf, -jnp.inf]), jnp.arange(4),
                 {"a": jnp.array([True]), "f": -jnp.ones(2)}, ()):
        out = jax.jit(after)(done, value)
        x = np.asarray(out["x"])
        np.testing.assert_array_equal(x, np.asarray(value["x"]))
        np.testing.assert_array_equal(np.signbit(x), np.signbit(np.asarray(value["x"])))
        np.testing.assert_array_equal(out["k"], value["k"])
        np.testing.assert_array_equal(out["b"], value["b"])
    grad = jax.grad(lambda d, v: jnp.sum(after(d, v) ** 2), argnums=(0, 1))
    g_done, g_value = grad(jnp.array([2.0, 3.0]), jnp.array([1.0, -4.0]))
    np.testing.assert_array_equal(g_done, [0.0, 0.0])
    np.testing.assert_array_equal(g_value, [2.0, -8.0])
    batched = jax.vmap(after)(jnp.arange(6.0).reshape(3, 2), jnp.ones((3, 4)))
    np.testing.assert_array_equal(batched, np.ones((3, 4)))


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


def test_large_batched_solves_in_sequence_finish_and_are_exact():
    """Programs that hung at 0 % CPU every time on the project's 2-core machine while their
    LAPACK calls could run at once, now in sequence: the multiplier solve of 2 560 systems of
    10 × 10 (a vmapped sweep of 256 ReLU students with 10 neurons each: the right-hand side,
    then the inverse's diagonal in the branch that takes the solution), and two solves of 100
    systems of 100 × 100 ordered by `after` (ordered by ``optimization_barrier`` they still
    hung). In a child
    process, so that a hang fails this test instead of the run; checked against numpy."""
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        import ibflow
        from ibflow._kinks.equivalent_control import _minimal_norm, _solves
        from ibflow._lapack import after
        rng = np.random.default_rng(0)
        system = rng.normal(size=(2560, 10, 10)) + 4 * np.eye(10)
        rhs = rng.normal(size=(2560, 10))
        solve = jax.jit(lambda s, r: _minimal_norm(s, r, lambda u: _solves(s, r, u)))
        for _ in range(100):
            u, diagonal, neutral = jax.block_until_ready(solve(system, rhs))
        inverse = np.linalg.inv(system)
        print(np.max(np.abs(u - np.linalg.solve(system, rhs[..., None])[..., 0])),
              np.max(np.abs(diagonal - np.diagonal(inverse, axis1=-2, axis2=-1))),
              bool(np.any(neutral)))
        A = rng.normal(size=(2, 100, 100, 100)) + 30 * np.eye(100)
        r = rng.normal(size=(2, 100, 100))
        def two(A, r):
            first = jnp.linalg.solve(A[0], r[0])
            return first, jnp.linalg.solve(*after(first, (A[1], r[1])))
        two = jax.jit(two)
        for _ in range(100):
            out = jax.block_until_ready(two(A, r))
        print(max(np.max(np.abs(o - np.linalg.solve(a, b))) for o, a, b in zip(out, A, r)))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=True).stdout.split()
    except subprocess.TimeoutExpired:
        pytest.fail("batched solves did not finish in 300 s (a LAPACK deadlock)")
    assert float(out[0]) < 1e-12 and float(out[1]) < 1e-12 and out[2] == "False"
    assert float(out[3]) < 1e-12


def test_the_multiplier_solve_differentiates_as_the_implicit_function():
    """The multiplier solve's own JVPs (`_regular`'s second solve, `_inverse_diagonal`'s
    from the inverse at hand) against central differences of numpy's solve and inverse, in
    the system and in the right-hand side."""
    rng = np.random.default_rng(1)
    system = rng.normal(size=(3, 5, 5)) + 3 * np.eye(5)
    rhs = rng.normal(size=(3, 5))
    d_system, d_rhs = rng.normal(size=system.shape), rng.normal(size=rhs.shape)
    for diagonal in (True, False):
        def solve(s, r, diagonal=diagonal):
            return _minimal_norm(s, r, lambda u: _solves(s, r, u), diagonal)

        _, (du, d_diag, _) = jax.jvp(solve, (system, rhs), (d_system, d_rhs))

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


def test_the_size_of_batched_lapack_calls_is_read_from_the_program():
    """`largest_batched_lapack_call`: the largest operand of a batched LAPACK call (leading
    dimensions of more than one matrix), unbatched calls not counted (jaxlib never splits
    them)."""
    rng = np.random.default_rng(2)

    def largest(fn, *args):
        return largest_batched_lapack_call(jax.jit(fn).lower(*args).compiler_ir("stablehlo"))

    assert largest(lambda a, b: a @ b, np.ones((50, 50)), np.ones(50)) == 0
    assert largest(jnp.linalg.solve, rng.normal(size=(200, 200)), rng.normal(size=200)) == 0
    assert largest(jnp.linalg.solve, rng.normal(size=(320, 10, 10)),
                   rng.normal(size=(320, 10, 1))) == 320 * 10 * 10
    triangular = functools.partial(jax.lax.linalg.triangular_solve, left_side=True, lower=True)
    assert largest(triangular, rng.normal(size=(10, 10, 10)),
                   rng.normal(size=(10, 10, 60))) == 10 * 10 * 60
    assert largest(jax.vmap(jnp.linalg.cholesky), rng.normal(size=(4, 3, 3))) == 4 * 3 * 3


def test_programs_with_batched_lapack_calls_at_the_limit_finish_beside_each_other():
    """`CONCURRENT_LAPACK_ELEMENTS` holds on this machine: two threads, each running a loop
    of batched solves or triangular solves of that many elements, finish (at four times the
    size they hung on the project's 2-core CPU). In a child process, so that a hang fails this
    test instead of the run; results checked against numpy."""
    code = textwrap.dedent("""
        import functools, jax, jax.numpy as jnp, numpy as np
        from concurrent.futures import ThreadPoolExecutor
        import ibflow
        from ibflow._lapack import CONCURRENT_LAPACK_ELEMENTS as LIMIT
        rng = np.random.default_rng(0)
        systems = LIMIT // 100
        A = rng.normal(size=(systems, 10, 10)) + 6 * np.eye(10)
        b = rng.normal(size=(systems, 10, 1))
        L = np.tril(rng.normal(size=(10, 10, 10))) + 6 * np.eye(10)
        B = rng.normal(size=(10, 10, LIMIT // 100))
        triangular = functools.partial(jax.lax.linalg.triangular_solve, left_side=True,
                                       lower=True)
        solve = jax.jit(lambda A, b: jax.lax.fori_loop(
            0, 200, lambda i, x: jnp.linalg.solve(A + 1e-9 * i, b), b))
        tri = jax.jit(lambda L, B: jax.lax.fori_loop(
            0, 200, lambda i, x: triangular(L + 1e-9 * i, B), B))
        jobs = [lambda: solve(A, b), lambda: tri(L, B)] * 4
        with ThreadPoolExecutor(2) as pool:
            out = list(pool.map(lambda job: jax.block_until_ready(job()), jobs))
        last = 1e-9 * 199  # the loops' last perturbation
        print(max(np.max(np.abs(out[0] - np.linalg.solve(A + last, b))),
                  np.max(np.abs(out[1] - np.linalg.solve(np.tril(L + last), B)))))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=True).stdout.split()
    except subprocess.TimeoutExpired:
        pytest.fail("two programs of batched LAPACK calls at the limit hung (300 s)")
    assert float(out[0]) < 1e-10
