"""Comparison 2: ``scipy.integrate.solve_ivp`` one configuration after another.

Two right-hand sides, both with ibflow's tolerances (rtol 1e-10, atol 1e-14) and stopped by a
terminal event at ibflow's target loss:

- ``parameters``: the plain gradient-flow ODE on the 4d parameters (what researchers write),
  ``u̇₊ = −g∘v₊, v̇₊ = −g∘u₊, u̇₋ = g∘v₋, v̇₋ = g∘u₋`` with ``g = Xᵀ(Xw − y)/n`` (docs/theory §2.3);
- ``reduced``: the closed-form n-dim reduction that ibflow itself integrates,
  ``ν̇ = −(2/n)(X w(ν) − y)``, ``w(ν) = P e^{Xᵀν} − N e^{−Xᵀν}`` (docs/theory §2.3) — the strongest
  baseline.

A configuration that does not finish within ``cap_s`` seconds is stopped and reported as a
lower bound (``≥``).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.integrate


class _OverTime(Exception):
    pass


def _rhs_parameters(X, y):
    n = X.shape[0]

    def loss(theta):
        up, vp, um, vm = np.split(theta, 4)
        return 0.5 * np.mean((X @ (up * vp - um * vm) - y) ** 2)

    def f(t, theta):
        up, vp, um, vm = np.split(theta, 4)
        g = X.T @ (X @ (up * vp - um * vm) - y) / n
        return np.concatenate([-g * vp, -g * up, g * vm, g * um])

    def predictor(theta):
        up, vp, um, vm = np.split(theta, 4)
        return up * vp - um * vm

    return f, loss, predictor


def _rhs_reduced(X, y, P, N):
    n = X.shape[0]

    def w_of(nu):
        rho = X.T @ nu
        return P * np.exp(rho) - N * np.exp(-rho)

    def f(t, nu):
        return -(2.0 / n) * (X @ w_of(nu) - y)

    def loss(nu):
        return 0.5 * np.mean((X @ w_of(nu) - y) ** 2)

    return f, loss, w_of


def solve(X, y, alpha, shape, *, ode: str, method: str, target: float, rtol=1e-10, atol=1e-14,
          t_max=1e14, cap_s=np.inf):
    """One configuration. Returns dict(w, seconds, steps (nfev/stages), converged, capped)."""
    d = X.shape[1]
    u0 = np.full(d, np.sqrt(alpha * (1 - shape) / (1 + shape)))
    v0 = np.full(d, np.sqrt(alpha * (1 + shape) / (1 - shape)))
    if ode == "parameters":
        f, loss, predictor = _rhs_parameters(X, y)
        state0 = np.concatenate([u0, v0, u0, v0])
    else:
        # docs/theory §2.3 / DiagonalNet.exp_coefficients for u₊ = u₋ = u₀, v₊ = v₋ = v₀.
        a, b = u0 + v0, u0 - v0
        P = N = (a**2 + b**2) / 4
        f, loss, predictor = _rhs_reduced(X, y, P, N)
        state0 = np.zeros(X.shape[0])
    start, calls = time.perf_counter(), [0]

    def rhs(t, s):
        calls[0] += 1
        if calls[0] % 64 == 0 and time.perf_counter() - start > cap_s:
            raise _OverTime
        return f(t, s)

    def event(t, s):
        return loss(s) - target

    event.terminal, event.direction = True, -1
    try:
        sol = scipy.integrate.solve_ivp(rhs, (0.0, t_max), state0, method=method, rtol=rtol,
                                        atol=atol, events=event, t_eval=[])
        seconds = time.perf_counter() - start
        final = sol.y_events[0][0] if sol.status == 1 else sol.y[:, -1] if sol.y.size else state0
        stages = {"RK45": 6, "DOP853": 12}[method]
        return dict(w=predictor(final), seconds=seconds, steps=sol.nfev / stages,
                    converged=sol.status == 1, capped=False)
    except _OverTime:
        return dict(w=None, seconds=time.perf_counter() - start, steps=np.nan, converged=False,
                    capped=True)
