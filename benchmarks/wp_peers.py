"""The peer methods of the work–precision benchmark (``benchmarks.work_precision``): what a
researcher would write instead of ibflow, one configuration at a time, on the host.

- ``scipy_solve``: ``scipy.integrate.solve_ivp`` (DOP853, LSODA, Radau, BDF) on the reduced
  n-dim ODE of theory §2.3, ``ν̇ = −(2/n)(X w(ν) − y)``, ``w(ν) = P e^{Xᵀν} − N e^{−Xᵀν}``, or on
  the 4d-parameter gradient-flow ODE, with analytic Jacobians for the implicit methods and a
  terminal event at a loss threshold.
- ``gd_solve``: the numpy GD loop of the original study (``benchmarks.gd_loop``) at one step.

Every solve takes a wall-clock ``deadline`` (``time.perf_counter()`` value) and gives up after it.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.integrate
import scipy.linalg

from . import gd_loop

IMPLICIT = ("LSODA", "Radau", "BDF")


class _OverTime(Exception):
    pass


def initial_factors(alpha, shape, d):
    """[AZ-7.1] ``u₀ = sqrt(α(1−s)/(1+s))``, ``v₀ = sqrt(α(1+s)/(1−s))`` for every coordinate."""
    u0 = np.full(d, np.sqrt(alpha * (1 - shape) / (1 + shape)))
    v0 = np.full(d, np.sqrt(alpha * (1 + shape) / (1 - shape)))
    return u0, v0


def reduced_ode(X, y, alpha, shape):
    """``(f, jac, loss, predictor, ν₀)`` of the reduced ODE for the unbiased net. For
    ``u₊ = u₋ = u₀``, ``v₊ = v₋ = v₀``: ``P = N = (u₀² + v₀²)/2 = k/4`` (docs/theory §2.3), so
    ``w = (k/2) sinh(Xᵀν)``. Jacobian ``−(2/n) X diag(P e^ρ + N e^{−ρ}) Xᵀ`` (docs/theory §8.1)."""
    n, d = X.shape
    u0, v0 = initial_factors(alpha, shape, d)
    P = N = (u0**2 + v0**2) / 2

    def w_of(nu):
        rho = X.T @ nu
        return P * np.exp(rho) - N * np.exp(-rho)

    def f(t, nu):
        return -(2.0 / n) * (X @ w_of(nu) - y)

    def jac(t, nu):
        rho = X.T @ nu
        return -(2.0 / n) * (X * (P * np.exp(rho) + N * np.exp(-rho))) @ X.T

    def loss(nu):
        return 0.5 * np.mean((X @ w_of(nu) - y) ** 2)

    return f, jac, loss, w_of, np.zeros(n)


def parameter_ode(X, y, alpha, shape):
    """``(f, jac, loss, predictor, θ₀)`` of the gradient flow on θ = (u₊, v₊, u₋, v₋) (docs/theory
    §2.3): ``u̇₊ = −g∘v₊, v̇₊ = −g∘u₊, u̇₋ = g∘v₋, v̇₋ = g∘u₋``, ``g = Xᵀ(Xw − y)/n``. The
    Jacobian is dense (4d × 4d): ``∂θ̇ᵢ/∂θⱼ = aᵢ H[i mod d, j mod d] cⱼ`` plus the ±diag(g)
    blocks, with ``H = XᵀX/n``, ``a = (−v₊, −u₊, v₋, u₋)``, ``c = ∂w/∂θ = (v₊, u₊, −v₋, −u₋)``."""
    n, d = X.shape
    u0, v0 = initial_factors(alpha, shape, d)
    H = X.T @ X / n
    H4 = np.tile(H, (4, 4))
    idx = np.arange(d)

    def predictor(theta):
        up, vp, um, vm = np.split(theta, 4)
        return up * vp - um * vm

    def grad(theta):
        return X.T @ (X @ predictor(theta) - y) / n

    def f(t, theta):
        up, vp, um, vm = np.split(theta, 4)
        g = grad(theta)
        return np.concatenate([-g * vp, -g * up, g * vm, g * um])

    def jac(t, theta):
        up, vp, um, vm = np.split(theta, 4)
        g = grad(theta)
        a = np.concatenate([-vp, -up, vm, um])
        c = np.concatenate([vp, up, -vm, -um])
        J = a[:, None] * H4 * c[None, :]
        # d(−g∘v₊)/dv₊ ∋ −diag(g); d(−g∘u₊)/du₊ ∋ −diag(g); d(g∘v₋)/dv₋, d(g∘u₋)/du₋ ∋ +diag(g)
        J[idx, d + idx] -= g
        J[d + idx, idx] -= g
        J[2 * d + idx, 3 * d + idx] += g
        J[3 * d + idx, 2 * d + idx] += g
        return J

    def loss(theta):
        return 0.5 * np.mean((X @ predictor(theta) - y) ** 2)

    return f, jac, loss, predictor, np.concatenate([u0, v0, u0, v0])


def scipy_solve(X, y, alpha, shape, *, ode: str, method: str, rtol: float, atol: float,
                target: float, deadline: float, t_max: float = 1e14):
    """One configuration with ``solve_ivp`` until ``loss ≤ target`` (terminal event).

    Returns ``dict(w, seconds, converged, over_time, nfev, njev)``; ``w`` is None when the
    deadline was hit."""
    build = reduced_ode if ode == "reduced" else parameter_ode
    f, jac, loss, predictor, state0 = build(X, y, alpha, shape)
    start, calls = time.perf_counter(), [0]

    def rhs(t, s):
        calls[0] += 1
        if calls[0] % 16 == 0 and time.perf_counter() > deadline:
            raise _OverTime
        return f(t, s)

    def event(t, s):
        return loss(s) - target

    event.terminal, event.direction = True, -1
    extra = {"jac": jac} if method in IMPLICIT else {}
    try:
        # An explicit method past its stability limit overflows before the deadline stops it.
        with np.errstate(over="ignore", invalid="ignore"):
            sol = scipy.integrate.solve_ivp(rhs, (0.0, t_max), state0, method=method,
                                            rtol=rtol, atol=atol, events=event, t_eval=[],
                                            **extra)
    except _OverTime:
        return dict(w=None, seconds=time.perf_counter() - start, converged=False,
                    over_time=True, nfev=calls[0], njev=0)
    seconds = time.perf_counter() - start
    final = sol.y_events[0][0] if sol.status == 1 else sol.y[:, -1] if sol.y.size else state0
    return dict(w=predictor(final), seconds=seconds, converged=sol.status == 1, over_time=False,
                nfev=int(sol.nfev), njev=int(sol.njev))


def gd_solve(X, y, alpha, shape, *, lr: float, target: float, deadline: float,
             check_every: int = 200):
    """The GD loop at step `lr` until ``loss ≤ target`` (checked every `check_every` steps).
    Returns ``dict(w, seconds, converged, over_time, iterations)``."""
    start = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        w, iters, loss, ok, _ = gd_loop.gd_loop(X, y, alpha, shape, lr=lr, target=target,
                                                check_every=check_every,
                                                max_seconds=max(deadline - start, 0.0))
    seconds = time.perf_counter() - start
    over = (not ok) and np.isfinite(loss) and time.perf_counter() >= deadline
    return dict(w=w, seconds=seconds, converged=bool(ok), over_time=bool(over),
                iterations=int(iters), diverged=not np.isfinite(loss))


def dual_newton_solve(X, y, alpha, shape, *, target: float, max_iterations: int = 100):
    """Damped Newton on the convex dual of Theorem 1, written plainly from the formula (docs/theory
    §2.3): ``D(ν) = Σⱼ (kⱼ/2) cosh((Xᵀν)ⱼ) − ⟨y, ν⟩``, ``∇D = X w(ν) − y`` with
    ``w = (k/2) sinh(Xᵀν)``, ``∇²D = X diag((k/2) cosh(Xᵀν)) Xᵀ``; Cholesky solve, step halved
    until ``D`` or ``‖∇D‖`` decreases, until ``loss = ½ mean((Xw − y)²) ≤ target``;
    ``k = 4α(1+s²)/(1−s²)``.
    Returns ``dict(w, seconds, converged, over_time, iterations)``."""
    start = time.perf_counter()
    half_k = np.full(X.shape[1], 2 * alpha * (1 + shape**2) / (1 - shape**2))
    nu, converged, it = np.zeros(X.shape[0]), False, 0
    with np.errstate(over="ignore", invalid="ignore"):
        def dual(nu):
            value = half_k @ np.cosh(X.T @ nu) - y @ nu
            return value if np.isfinite(value) else np.inf

        def residual(nu):
            value = np.linalg.norm(X @ (half_k * np.sinh(X.T @ nu)) - y)
            return value if np.isfinite(value) else np.inf

        for it in range(max_iterations):  # noqa: B007  (`it` is reported after the loop)
            rho = X.T @ nu
            w = half_k * np.sinh(rho)
            r = X @ w - y
            if 0.5 * np.mean(r**2) <= target:
                converged = True
                break
            H = (X * (half_k * np.cosh(rho))) @ X.T
            step = -scipy.linalg.cho_solve(scipy.linalg.cho_factor(H, lower=True), r)
            t, d0, r0 = 1.0, dual(nu), np.linalg.norm(r)
            # Near the root D's decrease drowns in its round-off (large k): a trial point that
            # shrinks the residual is accepted too.
            while not (dual(nu + t * step) < d0 or residual(nu + t * step) < r0) and t > 1e-30:
                t /= 2
            if t <= 1e-30:  # no decrease: the dual's round-off floor
                break
            nu = nu + t * step
    w = half_k * np.sinh(X.T @ nu)
    return dict(w=w, seconds=time.perf_counter() - start, converged=converged, over_time=False,
                iterations=it)
