"""Comparison 4: the Theorem-1 minimizer — ibflow's dual Newton (``ibflow.minimize_regularizer``
of ``ibflow.implicit_bias(model)``) against scipy SLSQP on ``Σ q_k(wᵢ)`` s.t. ``Xw = y`` (what the
authors' code does, docs/theory §2.8: SLSQP on ``q_func``, tol 1e-7; here with the exact gradient
and constraint Jacobian, which only helps SLSQP).

Both are measured against ``benchmark_dual_newton`` (this package's own numpy implementation,
independent of ibflow). Configuration: α = 1e-4, s = 0.5 (docs/theory §2.8 "Q vs GD check").
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import ibflow

from ._common import SEED, k_of, rel_dist, time_jax
from .reference import benchmark_dual_newton

ALPHA, SHAPE = 1e-4, 0.5


@eqx.filter_jit
def _ibflow_min(X, y, alpha, shape):
    model = ibflow.DiagonalNet.from_scale_shape(alpha, shape, dim=X.shape[1])
    sol = ibflow.minimize_regularizer(ibflow.implicit_bias(model), X, y, throw=False)
    return sol.w, sol.steps, sol.status._value


def q_objective(k):
    """``Σ q_k(wᵢ)`` and its gradient ``½ arcsinh(2w/k)`` (theory §2.3, the authors' q_func)."""

    def f(w):
        u = 2 * w / k
        return float(np.sum(k / 4 * (1 - np.sqrt(1 + u**2) + u * np.arcsinh(u))))

    def g(w):
        return 0.5 * np.arcsinh(2 * w / k)

    return f, g


def slsqp(X, y, k, *, tol=1e-7, cap_s=np.inf):
    """SLSQP from w = 0; stopped (via the callback) after `cap_s` seconds."""
    f, g = q_objective(k)
    start = time.perf_counter()

    def callback(*args):
        if time.perf_counter() - start > cap_s:
            raise StopIteration

    res = scipy.optimize.minimize(
        f, np.zeros(X.shape[1]), jac=g, method="SLSQP", tol=tol, callback=callback,
        constraints=[{"type": "eq", "fun": lambda w: X @ w - y, "jac": lambda w: X}],
        options={"maxiter": 10_000})
    return res.x, time.perf_counter() - start, int(res.nit), bool(res.success)


def run(sizes, *, runs: int, cap_s: float):
    """`sizes`: list of (d, n). Returns one dict per size."""
    out = []
    for d, n in sizes:
        data = ibflow.data.sparse_regression(jax.random.key(SEED), n=n, d=d)
        X, y = np.asarray(data.X), np.asarray(data.y)
        k = k_of(ALPHA, SHAPE)
        ref = benchmark_dual_newton(X, y, k)
        have = hasattr(ibflow, "minimize_regularizer") and hasattr(ibflow, "implicit_bias")
        entry = dict(d=d, n=n, available=have)
        if have:
            t = time_jax(lambda X=X, y=y: _ibflow_min(jnp.asarray(X), jnp.asarray(y), ALPHA,
                                                      SHAPE),
                         runs=max(runs, 5))
            w, steps, status = (np.asarray(v) for v in t.result)
            entry["ibflow"] = dict(timing=t, steps=int(steps), dist=float(rel_dist(w, ref)),
                                   converged=int(status) == 0)
        runs_slsqp = []
        for _ in range(runs if d * n <= 10_000 else 1):
            w, secs, nit, ok = slsqp(X, y, k, cap_s=cap_s)
            runs_slsqp.append(secs)
        entry["slsqp"] = dict(run_s=float(np.median(runs_slsqp)), steps=nit, success=ok,
                              capped=secs > cap_s, dist=float(rel_dist(w, ref)),
                              runs=len(runs_slsqp))
        out.append(entry)
    return out
