"""General-model benchmark (issue 12, item 3): ibflow vs scipy's stiff solvers on the
parameter ODE of three models with 10³–10⁴ parameters, side by side in one run.

    python -m benchmarks.general_models [--small] [--cap SECONDS] [--out DIR]

Cases (docs/theory §2.3, §2.4, §3, §8.1):

1. ``DiagonalNet.from_scale_shape(α, s=0.5, dim=d)`` integrated through its 4d parameters
   (``formulation=ParameterSpace()``) on the seed-1993 sparse regression data (d = 1000,
   n = 100). Reference: the Theorem-1 minimizer ``minimize_regularizer(implicit_bias(model))``.
2. ``FullyConnectedNet`` of width 10 with strictly balanced initialization ``W₁ = a vᵀ``,
   ``‖v‖ = 1`` on the same data. Reference: Proposition 1's minimizer, i.e. the width-1 net with
   the same end-to-end predictor and δ = 0.
3. ``ShallowNet.init(4096)`` (ReLU) on 5 univariate points in [−1, 1] under
   ``MirrorFlow(CubicPotential(), learning_rate=1/4096)``; 3·4096 + 1 parameters. No closed
   form: the reference is the other side's solution (ibflow vs the scipy runs that converged),
   distances on ``θ(∞) − θ(0)``.

Both sides integrate the same ODE from the same initialization to the same target, ibflow's
default ``1e-24 · mean(y²)/2`` on ``L = ½·mean(r²)``. scipy side: the solver classes behind
``scipy.integrate.solve_ivp`` (BDF, Radau, LSODA) with rtol 1e-10, atol 1e-14, t_bound 1e14 (no
log-time substitution: the stiff solvers grow the step on their own), the loss checked after
every accepted step (a terminal event without the root refinement) and the vector field and
Jacobian in numpy: analytic Jacobians for cases 1 and 2, scipy's finite differences for case 3.
Every scipy run is capped in wall time (checked inside the vector field and after each step);
a capped run is reported as "> cap" and its speed ratio as a lower bound.

ibflow times are medians after a compile call (``_common.time_jax``); scipy times are one run.
The machine is shared, so the times are indicative.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

import ibflow
from ibflow._status import STATUS_NAMES

from . import _common as C
from ._common import Row

RTOL, ATOL, T_BOUND = 1e-10, 1e-14, 1e14
SCIPY_METHODS = ("BDF", "Radau", "LSODA")


@dataclasses.dataclass(frozen=True)
class Size:
    n: int
    d: int
    fc_width: int
    shallow_width: int
    alphas: tuple[float, ...]
    shallow_max_steps: int = 100_000  # ibflow's default budget

    @staticmethod
    def of(small: bool) -> "Size":
        if small:
            # Width 8: through its kinks the flow converges in ~7 300 steps, 1.6 s of run
            # time in the test suite's -O0 build (width 32: ~6 900 steps, 3.8 s; width 128
            # ~15 000; a smoke test need not pay for them).
            return Size(n=20, d=120, fc_width=3, shallow_width=8, alphas=(1e-3,))
        return Size(n=100, d=1000, fc_width=10, shallow_width=4096, alphas=(1e-3,))


@dataclasses.dataclass
class Case:
    """One model: how ibflow integrates it and the same ODE in numpy for scipy."""

    name: str
    params: int
    run_ibflow: Callable[[], ibflow.Solution]  # jitted, no arguments
    theta0: np.ndarray
    rhs: Callable[[np.ndarray], np.ndarray]
    jac: Callable[[np.ndarray], np.ndarray] | None  # None: finite differences
    loss: Callable[[np.ndarray], float]
    target: float
    # The quantity compared to the reference: the predictor, or θ − θ₀ (case 3).
    compare: Callable[[np.ndarray], np.ndarray]
    compare_ibflow: Callable[[ibflow.Solution], np.ndarray]
    reference: np.ndarray | None  # None: the reference is the other side's solution
    reference_note: str


def _default_target(y) -> float:
    y = np.asarray(y)
    return float(1e-24 * np.mean(y**2) / 2)


def _ibflow_parameters(model, X, y):
    return jax.jit(lambda m: ibflow.integrate(m, X, y, formulation=ibflow.ParameterSpace(),
                                                      throw=False))


# ----------------------------------------------------------------------------------------------
# Case 1: diagonal net through its 4d parameters
# ----------------------------------------------------------------------------------------------


def diagonal_case(X, y, alpha: float, shape: float = 0.5) -> Case:
    n, d = X.shape
    model = ibflow.DiagonalNet.from_scale_shape(alpha, shape, dim=d)
    ref = np.asarray(ibflow.minimize_regularizer(ibflow.implicit_bias(model), X, y).w)
    solve = _ibflow_parameters(model, X, y)
    Xn, yn = np.asarray(X), np.asarray(y)
    G, c = Xn.T @ Xn / n, Xn.T @ yn / n

    def split(th):
        return np.split(th, 4)

    def pred(th):
        up, vp, um, vm = split(th)
        return up * vp - um * vm

    def rhs(th):
        up, vp, um, vm = split(th)
        g = G @ pred(th) - c
        return np.concatenate([-g * vp, -g * up, g * vm, g * um])

    def jac(th):
        # f = s ∘ g(w(θ)) blockwise with s = (−v₊, −u₊, v₋, u₋); ∂g/∂θ = G·B with
        # B = ∂w/∂θ = (diag v₊, diag u₊, −diag v₋, −diag u₋); plus ∂s/∂θ ∘ g (docs/theory §2.3).
        up, vp, um, vm = split(th)
        g = G @ pred(th) - c
        s = np.concatenate([-vp, -up, vm, um])
        b = np.concatenate([vp, up, -vm, -um])
        J = np.tile(G, (4, 4))
        J *= s[:, None]
        J *= b[None, :]
        i = np.arange(d)
        J[i, d + i] -= g  # ∂(−g v₊)/∂v₊
        J[d + i, i] -= g  # ∂(−g u₊)/∂u₊
        J[2 * d + i, 3 * d + i] += g
        J[3 * d + i, 2 * d + i] += g
        return J

    theta0 = np.concatenate([np.asarray(model.u_plus), np.asarray(model.v_plus),
                             np.asarray(model.u_minus), np.asarray(model.v_minus)])
    return Case(
        name=f"DiagonalNet 4d params, α={alpha:g}, s={shape:g}, d={d}, n={n}", params=4 * d,
        run_ibflow=lambda: solve(model), theta0=theta0, rhs=rhs, jac=jac,
        loss=lambda th: 0.5 * float(np.mean((Xn @ pred(th) - yn) ** 2)),
        target=_default_target(y), compare=pred,
        compare_ibflow=lambda sol: np.asarray(sol.predictor), reference=ref,
        reference_note="Theorem-1 minimizer (minimize_regularizer, dual Newton)")


# ----------------------------------------------------------------------------------------------
# Case 2: fully connected net, width k, strictly balanced rank-one start
# ----------------------------------------------------------------------------------------------


def fully_connected_case(X, y, width: int, alpha: float = 1e-2, seed: int = 0) -> Case:
    n, d = X.shape
    ka, kv = jax.random.split(jax.random.key(seed))
    a = jax.random.normal(ka, (width,))
    a = a * jnp.sqrt(alpha) / jnp.linalg.norm(a)  # ‖a‖² = α = ‖W₁‖_F² (balanced, δ = 0)
    v = jax.random.normal(kv, (d,))
    v = v / jnp.linalg.norm(v)
    model = ibflow.FullyConnectedNet(first=a[:, None] * v[None], second=a)
    na = jnp.linalg.norm(a)
    width1 = ibflow.FullyConnectedNet(first=(na * v)[None], second=jnp.array([na]))
    ref = np.asarray(ibflow.minimize_regularizer(ibflow.implicit_bias(width1), X, y).w)
    solve = _ibflow_parameters(model, X, y)
    Xn, yn = np.asarray(X), np.asarray(y)
    G, c = Xn.T @ Xn / n, Xn.T @ yn / n
    k, kd = width, width * d

    def split(th):
        return th[:kd].reshape(k, d), th[kd:]

    def pred(th):
        W, a_ = split(th)
        return W.T @ a_

    def rhs(th):
        W, a_ = split(th)
        g = G @ (W.T @ a_) - c  # ∇_w̃ L
        return np.concatenate([(-np.outer(a_, g)).ravel(), -W @ g])

    def jac(th):
        # Ẇ = −a gᵀ, ȧ = −W g, g = G Wᵀa − c:
        # ∂Ẇ_ij/∂W_lm = −a_i a_l G_jm,  ∂Ẇ_ij/∂a_l = −a_i (G W_l)_j − δ_il g_j,
        # ∂ȧ_i/∂W_lm = −δ_il g_m − a_l (W G)_im,  ∂ȧ_i/∂a_l = −W_i G W_lᵀ.
        W, a_ = split(th)
        g = G @ (W.T @ a_) - c
        WG = W @ G  # (k, d); G symmetric so (G W_l)_j = (W G)_lj
        J = np.empty((kd + k, kd + k))
        J[:kd, :kd].reshape(k, d, k, d)[...] = -np.einsum("i,l,jm->ijlm", a_, a_, G)
        top_right = -np.einsum("i,lj->ijl", a_, WG)
        top_right[np.arange(k), :, np.arange(k)] -= g
        J[:kd, kd:] = top_right.reshape(kd, k)
        bottom_left = -np.einsum("l,im->ilm", a_, WG)
        bottom_left[np.arange(k), np.arange(k), :] -= g
        J[kd:, :kd] = bottom_left.reshape(k, kd)
        J[kd:, kd:] = -WG @ W.T
        return J

    theta0 = np.concatenate([np.asarray(model.first).ravel(), np.asarray(model.second)])
    return Case(
        name=f"FullyConnectedNet width {k}, balanced rank-one, α={alpha:g}, d={d}, n={n}",
        params=kd + k, run_ibflow=lambda: solve(model), theta0=theta0, rhs=rhs, jac=jac,
        loss=lambda th: 0.5 * float(np.mean((Xn @ pred(th) - yn) ** 2)),
        target=_default_target(y), compare=pred,
        compare_ibflow=lambda sol: np.asarray(sol.predictor), reference=ref,
        reference_note="Proposition-1 minimizer of the width-1 net with the same predictor, δ=0")


# ----------------------------------------------------------------------------------------------
# Case 3: shallow ReLU net under mirror flow with the cubic potential
# ----------------------------------------------------------------------------------------------

SHALLOW_X = np.array([-0.9, -0.4, 0.1, 0.5, 0.85])
SHALLOW_Y = np.array([0.3, -0.2, 0.4, 0.1, -0.3])


def shallow_case(width: int, seed: int = 3, max_steps: int = 100_000) -> Case:
    model = ibflow.ShallowNet.init(width, key=jax.random.key(seed))
    X, y = jnp.asarray(SHALLOW_X)[:, None], jnp.asarray(SHALLOW_Y)
    eta = 1.0 / width
    flow = ibflow.MirrorFlow(ibflow.CubicPotential(), learning_rate=eta)
    solve = jax.jit(lambda m: ibflow.integrate(m, X, y, flow=flow, throw=False,
                                                max_steps=max_steps))
    m = SHALLOW_X.shape[0]
    w0, b0 = np.asarray(model.w), np.asarray(model.b)
    theta0 = np.concatenate([w0, b0, np.asarray(model.a), np.asarray(model.d)[None]])
    x = SHALLOW_X

    def split(th):
        return th[:width], th[width:2 * width], th[2 * width:3 * width], th[3 * width]

    def residual(th):
        w, b, a, d0 = split(th)
        z = np.outer(x, w) - b  # (m, width)
        return np.maximum(z, 0.0) @ a + d0 - SHALLOW_Y, z

    def rhs(th):
        # θ̇ = −η ∇L / φ''(θ − θ₀), φ'' = 6|·| + 2 (CubicPotential), L = ½·mean(r²).
        w, b, a, d0 = split(th)
        r, z = residual(th)
        act, on = np.maximum(z, 0.0), (z > 0).astype(float)
        ra = (r[:, None] * on) * a[None, :] / m
        grad = np.concatenate([ra.T @ x, -ra.sum(0), act.T @ r / m, [r.mean()]])
        return -eta * grad / (6 * np.abs(th - theta0) + 2)

    def compare(th):
        return th - theta0

    def compare_ibflow(sol):
        mm = sol.model
        return np.concatenate([np.asarray(mm.w), np.asarray(mm.b), np.asarray(mm.a),
                               np.asarray(mm.d)[None]]) - theta0

    return Case(
        name=f"ShallowNet (ReLU) width {width}, MirrorFlow(CubicPotential, η=1/{width}), "
             f"m={m} points",
        params=3 * width + 1, run_ibflow=lambda: solve(model), theta0=theta0, rhs=rhs,
        jac=None, loss=lambda th: 0.5 * float(np.mean(residual(th)[0] ** 2)),
        target=_default_target(SHALLOW_Y), compare=compare, compare_ibflow=compare_ibflow,
        reference=None, reference_note="no closed form: ibflow vs the converged scipy runs, "
                                       "on θ(∞) − θ(0)")


# ----------------------------------------------------------------------------------------------
# Runners
# ----------------------------------------------------------------------------------------------


class _OverTime(Exception):
    pass


def _blas_limit(threads: int | None):
    """Limit numpy's BLAS threads for the scipy runs (`threadpoolctl`, if installed). On the
    shared 2-core machine (load ≈ 10) multithreaded OpenBLAS spins: a 363 × 363 LU took 0.18 s
    with the default threads and the whole BDF run was 4× slower than with 1 thread."""
    import contextlib

    if threads is None:
        return contextlib.nullcontext()
    try:
        import threadpoolctl
    except ImportError:
        return contextlib.nullcontext()
    return threadpoolctl.threadpool_limits(limits=threads, user_api="blas")


def run_scipy(case: Case, method: str, cap_s: float, blas_threads: int | None = 1) -> dict:
    """Step the solve_ivp solver class by hand until ``L ≤ target``, the time bound, a failure
    or the wall-time cap."""
    with _blas_limit(blas_threads):
        return _run_scipy(case, method, cap_s)


def _run_scipy(case: Case, method: str, cap_s: float) -> dict:
    start = time.perf_counter()
    calls = [0]

    def fun(t, th):
        calls[0] += 1
        if calls[0] % 16 == 0 and time.perf_counter() - start > cap_s:
            raise _OverTime
        return case.rhs(th)

    kwargs = dict(rtol=RTOL, atol=ATOL)
    if case.jac is not None:
        kwargs["jac"] = lambda t, th: case.jac(th)
    solver_cls = {"BDF": scipy.integrate.BDF, "Radau": scipy.integrate.Radau,
                  "LSODA": scipy.integrate.LSODA}[method]
    steps, status, th = 0, "running", case.theta0
    try:
        solver = solver_cls(fun, 0.0, case.theta0.copy(), T_BOUND, **kwargs)
        while True:
            message = solver.step()
            steps += 1
            th = solver.y
            if solver.status == "failed":
                status = f"solver_failed ({message})"
                break
            if case.loss(th) <= case.target:
                status = "converged"
                break
            if solver.status == "finished":
                status = "t_bound reached"
                break
            if time.perf_counter() - start > cap_s:
                raise _OverTime
    except _OverTime:
        status = "capped"
    except MemoryError:
        status = "out of memory"
    seconds = time.perf_counter() - start
    nfev = calls[0]
    njev = getattr(solver, "njev", None) if "solver" in locals() else None
    nlu = getattr(solver, "nlu", None) if "solver" in locals() else None
    return dict(method=method, seconds=seconds, steps=steps, nfev=nfev, njev=njev, nlu=nlu,
                status=status, loss=case.loss(th), value=case.compare(th),
                t=float(getattr(solver, "t", 0.0)) if "solver" in locals() else 0.0)


def run_ibflow(case: Case, runs: int) -> dict:
    timing = C.time_jax(case.run_ibflow, runs=runs)
    sol = timing.result
    return dict(timing=timing, steps=int(sol.steps), status=STATUS_NAMES[int(sol.status._value)],
                loss=float(sol.loss), value=case.compare_ibflow(sol), time=float(sol.time))


def _rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def run_case(case: Case, *, runs: int, cap_s: float, blas_threads: int | None = 1,
             log=print) -> dict:
    log(f"[general] {case.name}: ibflow ...")
    ib = run_ibflow(case, runs)
    log(f"[general]   ibflow {ib['timing'].run_s:.2f} s (compile {ib['timing'].compile_s:.1f} s)"
        f", {ib['steps']} steps, {ib['status']}, loss {ib['loss']:.2e}")
    sc = []
    for method in SCIPY_METHODS:
        r = run_scipy(case, method, cap_s, blas_threads)
        log(f"[general]   scipy {method}: {r['seconds']:.1f} s, {r['steps']} steps, "
            f"nfev {r['nfev']}, njev {r['njev']}, {r['status']}, loss {r['loss']:.2e}")
        sc.append(r)
    if case.reference is not None:
        ib["dist"] = _rel(ib["value"], case.reference)
        for r in sc:
            r["dist"] = _rel(r["value"], case.reference)
    else:
        # No closed form: the scipy runs that converged are the reference for ibflow, and
        # ibflow's solution is the reference for every scipy run.
        conv = [r for r in sc if r["status"] == "converged"]
        ib["dist"] = min(_rel(ib["value"], r["value"]) for r in conv) if conv else None
        ib["dist_note"] = (f"vs scipy {', '.join(r['method'] for r in conv)} (closest)"
                           if conv else "no scipy run converged: no reference")
        for r in sc:
            r["dist"] = _rel(r["value"], ib["value"])
    return dict(case=case, ibflow=ib, scipy=sc, cap_s=cap_s)


def _speedup(res) -> tuple[float, bool, str]:
    """(ratio of scipy's best to ibflow's run time, lower bound?, which scipy)."""
    ib_s = res["ibflow"]["timing"].run_s
    if res["ibflow"]["status"] != "converged":
        return math.nan, False, "ibflow did not converge"
    conv = [r for r in res["scipy"] if r["status"] == "converged"]
    if conv:
        best = min(conv, key=lambda r: r["seconds"])
        return best["seconds"] / ib_s, False, best["method"]
    # None converged: each was capped or gave up; only a cap gives a lower bound.
    capped = [r for r in res["scipy"] if r["status"] == "capped"]
    if capped:
        return res["cap_s"] / ib_s, True, "all capped or failed"
    return math.nan, False, "none converged"


def rows(results: list[dict]) -> list[Row]:
    out = []
    for i, res in enumerate(results, 1):
        case, ib = res["case"], res["ibflow"]
        t = ib["timing"]
        note = f"{ib['status']}, loss {ib['loss']:.2e} (target {case.target:.1e}); " \
               f"median of {t.runs} runs; p = {case.params}"
        if "dist_note" in ib:
            note += f"; dist {ib['dist_note']}"
        else:
            note += f"; dist vs {case.reference_note}"
        out.append(Row("G", f"case {i} {case.name}: ibflow", 1, compile_s=t.compile_s,
                       run_s=t.run_s, steps=ib["steps"], dist=ib["dist"], note=note))
        for r in res["scipy"]:
            shown = f"> {res['cap_s']:g} (cap)" if r["status"] == "capped" else None
            jac = "analytic Jacobian" if case.jac is not None else "finite-difference Jacobian"
            out.append(Row(
                "G", f"case {i}: scipy {r['method']}", 1,
                run_s=None if shown else r["seconds"], steps=r["steps"], dist=r["dist"],
                value=shown,
                note=f"{r['status']}, loss {r['loss']:.2e}, t {r['t']:.2e}; nfev {r['nfev']}, "
                     f"njev {r['njev']}, nlu {r['nlu']}; {jac}; rtol {RTOL:g}, atol {ATOL:g}"
                     + ("; dist vs ibflow" if case.reference is None else "")))
        ratio, lower, which = _speedup(res)
        out.append(Row("G", f"case {i}: ibflow run time ≤ 10 s", value=t.run_s, target="≤ 10 s",
                       passed=bool(t.run_s <= 10 and ib["status"] == "converged"),
                       note="after compile; fails also if ibflow did not converge"))
        out.append(Row("G", f"case {i}: scipy best / ibflow", value=ratio,
                       target="≥ 10×",
                       passed=None if math.isnan(ratio) else bool(ratio >= 10),
                       note=("lower bound (scipy capped): " if lower else "") + which))
    return out


GEN_COLUMNS = ("case", "method", "wall [s]", "compile [s]", "steps", "nfev / njev",
               "rel. distance", "status")


def table(results: list[dict]) -> str:
    def f(v, digits=3):
        return C._fmt(v) if v is not None else "—"

    lines = ["| " + " | ".join(GEN_COLUMNS) + " |", "|" + "|".join("---" for _ in GEN_COLUMNS)
             + "|"]
    for i, res in enumerate(results, 1):
        case, ib = res["case"], res["ibflow"]
        t = ib["timing"]
        lines.append(f"| {i}. {case.name} (p = {case.params}) | ibflow | {f(t.run_s)} | "
                     f"{f(t.compile_s)} | {ib['steps']} | — | {f(ib['dist'])} | "
                     f"{ib['status']} (loss {ib['loss']:.1e}) |")
        for r in res["scipy"]:
            wall = f"> {res['cap_s']:g} (cap)" if r["status"] == "capped" else f(r["seconds"])
            lines.append(f"| {i} | scipy {r['method']} | {wall} | — | {r['steps']} | "
                         f"{r['nfev']} / {r['njev']} | {f(r['dist'])} | "
                         f"{r['status']} (loss {r['loss']:.1e}) |")
    lines.append("")
    lines.append("| case | ibflow ≤ 10 s | scipy best / ibflow (target ≥ 10×) |")
    lines.append("|---|---|---|")
    for i, res in enumerate(results, 1):
        ratio, lower, which = _speedup(res)
        ib = res["ibflow"]
        ok = ib["timing"].run_s <= 10 and ib["status"] == "converged"
        r_txt = f"n/a ({which})" if math.isnan(ratio) else \
            f"{'≥ ' if lower else ''}{ratio:.3g}× ({which}) {'PASS' if ratio >= 10 else 'FAIL'}"
        lines.append(f"| {i} | {ib['timing'].run_s:.3g} s {'PASS' if ok else 'FAIL'} | {r_txt} |")
    return "\n".join(lines) + "\n"


def figure(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = ["ibflow"] + [f"scipy {m}" for m in SCIPY_METHODS]
    width = 0.8 / len(labels)
    for j, lab in enumerate(labels):
        xs, hs, hatch = [], [], []
        for i, res in enumerate(results):
            if j == 0:
                h, capped = res["ibflow"]["timing"].run_s, False
            else:
                r = res["scipy"][j - 1]
                h, capped = r["seconds"], r["status"] != "converged"
            xs.append(i + (j - (len(labels) - 1) / 2) * width)
            hs.append(h)
            hatch.append(capped)
        bars = ax.bar(xs, hs, width, label=lab)
        for b, hatched in zip(bars, hatch):
            if hatched:
                b.set_hatch("//")
                b.set_alpha(0.6)
    ax.set_yscale("log")
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"case {i}\np = {r['case'].params}" for i, r in
                        enumerate(results, 1)])
    ax.set_ylabel("wall time after compile [s]")
    ax.set_title("ibflow vs scipy stiff solvers to L ≤ 1e-24·mean(y²)/2 "
                 "(hatched: did not converge / capped)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cases(small: bool) -> list[Case]:
    size = Size.of(small)
    data = ibflow.data.sparse_regression(jax.random.key(C.SEED), n=size.n, d=size.d)
    out = [diagonal_case(data.X, data.y, a) for a in size.alphas]
    out.append(fully_connected_case(data.X, data.y, size.fc_width))
    out.append(shallow_case(size.shallow_width, max_steps=size.shallow_max_steps))
    return out


def run(small: bool, *, cap_s: float | None = None, runs: int | None = None,
        blas_threads: int | None = 1, log=None) -> list[dict]:
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    cap_s = cap_s if cap_s is not None else (0.5 if small else 90.0)
    runs = runs if runs is not None else (1 if small else 3)
    return [run_case(c, runs=runs, cap_s=cap_s, blas_threads=blas_threads, log=log)
            for c in cases(small)]


def write(results: list[dict], machine: dict, out_dir: str, small: bool) -> dict[str, str]:
    title = "General-model benchmark (issue 12, item 3)" + (" — SMALL sizes" if small else "")
    intro = ("Target for both sides: ibflow's default loss threshold 1e-24·mean(y²)/2 "
             "(L = ½·mean(r²)). scipy: BDF/Radau/LSODA solver classes of solve_ivp, rtol "
             f"{RTOL:g}, atol {ATOL:g}, t_bound {T_BOUND:g}, no log-time substitution, loss "
             f"checked after each step, wall cap {results[0]['cap_s']:g} s per run, BLAS "
             "threads as listed under Machine. ibflow: median run time after a compile call. "
             "The machine is shared with other jobs: times are indicative.")
    return C.write_report(out_dir, "general_models", title, machine, intro, table(results),
                          lambda path: figure(results, path))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.general_models", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="small sizes (smoke test, < 60 s)")
    ap.add_argument("--cap", type=float, default=None, help="wall cap per scipy run [s]")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for the scipy runs (0: library default)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    machine = C.machine()
    blas = args.blas_threads or None
    machine["scipy BLAS threads"] = blas or "default"
    results = run(args.small, cap_s=args.cap, blas_threads=blas)
    paths = write(results, machine, args.out, args.small)
    print(table(results))
    print("written: " + ", ".join(paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
