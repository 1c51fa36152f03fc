"""Measurements behind the issue-8 claims (differentiable limit points)::

    python -m benchmarks.differentiable [implicit] [memory] [--quick]


1. Cost of the implicit gradient against one minimizer solve (diagonal net, docs/theory §2.8 data).
2. Memory of the through-the-solve gradient vs the number of checkpoints on a long plateau
   (α = 1e-5), from XLA's compiled memory analysis, and its run time.

Timings: compile first, then the median of several runs (``jax.block_until_ready``).
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import ibflow


def _median_time(fn, *args, repeats=5):
    jax.block_until_ready(fn(*args))  # compile + warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def implicit_cost(n=100, d=1000, alpha=1e-3):
    data = ibflow.data.sparse_regression(jax.random.key(1993), n=n, d=d, k=5, noise=0.1,
                                         n_test=2000)
    shape = jnp.full(d, 0.5)
    args = (shape, data.X, data.y, data.X_test, data.y_test)  # arguments, not constants

    def Q_of(s):
        return ibflow.implicit_bias(ibflow.DiagonalNet.from_scale_shape(alpha, s))

    def error(w, Xt, yt):
        return jnp.mean((Xt @ w - yt) ** 2)

    solve = jax.jit(lambda s, X, y, Xt, yt: error(
        ibflow.minimize_regularizer(Q_of(s), X, y).w, Xt, yt))
    primal = jax.jit(lambda s, X, y, Xt, yt: error(
        ibflow.differentiable_minimize(Q_of(s), X, y).w, Xt, yt))
    grad = jax.jit(jax.value_and_grad(lambda s, X, y, Xt, yt: error(
        ibflow.differentiable_minimize(Q_of(s), X, y).w, Xt, yt)))
    steps = int(ibflow.minimize_regularizer(Q_of(shape), data.X, data.y).steps)
    t_solve, t_primal, t_grad = (_median_time(f, *args, repeats=15)
                                 for f in (solve, primal, grad))
    return {"n": n, "d": d, "alpha": alpha, "newton_steps": steps, "minimizer_s": t_solve,
            "differentiable_forward_s": t_primal, "value_and_grad_s": t_grad,
            "gradient_overhead_over_solve": (t_grad - t_solve) / t_solve}


def checkpoint_memory(n=10, d=100, alpha=1e-5, checkpoints=(4, 16, 64, 256, None),
                      max_steps=20_000):
    data = ibflow.data.sparse_regression(jax.random.key(0), n=n, d=d, k=3, noise=0.0,
                                         n_test=200)
    shape = jnp.zeros(d)
    rows = []
    for c in checkpoints + (max_steps,):
        def f(s, c=c):
            m = ibflow.DiagonalNet.from_scale_shape(alpha, s)
            w = ibflow.limit_point(m, data.X, data.y, route="solve", checkpoints=c,
                                   formulation=ibflow.ParameterSpace(),
                                   max_steps=max_steps).predictor
            return data.test_error(w)

        compiled = jax.jit(jax.grad(f)).lower(shape).compile()
        mem = compiled.memory_analysis()
        row = {"checkpoints": c if c is not None else "default",
               "temp_MiB": mem.temp_size_in_bytes / 2**20}
        if c != max_steps:
            row["grad_s"] = _median_time(compiled, shape, repeats=3)
        rows.append(row)
        print(row, flush=True)
    # The forward solve alone (one compiled program: its step count and its time).
    forward = jax.jit(lambda s: ibflow.integrate(
        ibflow.DiagonalNet.from_scale_shape(alpha, s), data.X, data.y,
        formulation=ibflow.ParameterSpace(), max_steps=max_steps).steps)
    return {"n": n, "d": d, "alpha": alpha, "state_size": 4 * d,
            "forward_solve_s": _median_time(forward, shape, repeats=3),
            "steps": int(forward(shape)), "rows": rows}


def main(argv: list[str]) -> None:
    quick = "--quick" in argv  # tiny sizes: checks that the benchmark runs, not what it measures
    which = [a for a in argv if a != "--quick"] or ["implicit", "memory"]
    if "implicit" in which:
        print(implicit_cost(**({"n": 10, "d": 40} if quick else {})), flush=True)
    if "memory" in which:
        print(checkpoint_memory(**({"d": 20, "alpha": 0.1, "checkpoints": (), "max_steps": 4000}
                                   if quick else {})), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
