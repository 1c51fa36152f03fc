"""``python -m benchmarks.work_precision [--small] [--out DIR] [--cap S]``: the work–precision
benchmark of issue 14 on the Figure 7.1 grid.

Problem: docs/theory §2.8, ``ibflow.data.sparse_regression`` with seed 1993, d = 1000, n = 100,
5 shapes × 20 scales α = logspace(−5, −0.6), unbiased diagonal net (``--small``: d = 60, n = 12,
2 shapes × 3 scales, two settings per method, < 60 s). Reference: the exact Theorem-1 minimizers
``ibflow.minimize_regularizer(ibflow.implicit_bias(model), X, y)`` with their certificates,
cross-checked against this package's numpy dual Newton.

For each method and each setting of its accuracy knob: grid wall time (JAX methods: a warm call,
compile reported apart; host methods: wall clock) and the max and median relative ℓ2 distance of
the limit predictors to the reference. Methods: ``ibflow.sweep`` at several rtol/targets (the
default options marked); scipy ``solve_ivp`` DOP853 / LSODA / Radau / BDF on the reduced n-dim ODE
and on the 4d-parameter ODE (analytic Jacobians for the implicit ones, a loss-threshold event);
the numpy GD loop at several steps, with and without Richardson extrapolation
``2·w(η/2) − w(η)``. Slow peers run on a documented subset of members and their grid time is
scaled to all members; such rows say "extrapolated from k members". Each setting has a wall-time
cap; a setting that exceeds it is reported as skipped, with the reason, and tighter settings of
the same method are skipped too.

Writes ``DIR/work_precision.md`` (the table, the ratio-to-best-peer table, the machine),
``DIR/work_precision.png`` (log–log: max error vs wall time, and median error vs wall time) and
``DIR/work_precision.json`` (the points; ``--replot`` redraws the PNG from it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

from . import _common as C
from . import reference as reference_mod
from . import wp_peers
from .ibflow_grid import sweep_with

LEVELS = (1e-4, 1e-6, 1e-8, 1e-10)
DUAL_NEWTON = "numpy damped Newton (dual)"
#: The default sweep's roofline (filled by `run_ibflow`): one dict, see `roofline_row`.
roofline: list = []


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Settings:
    small: bool
    cap_s: float  # wall-time cap of one setting of one method (over its members)
    full_budget_s: float  # a peer setting whose subset predicts ≤ this runs on every member
    ibflow: list  # (label, options, relative target or None)
    scipy: list  # (rtol, relative target)
    scipy_methods: tuple
    gd_steps: tuple
    gd_target_rel: float
    subset: dict  # peer kind → member indices (None: all members)

    @classmethod
    def make(cls, small: bool, p: C.Problem, cap_s: float | None):
        if small:
            return cls(
                small=True, cap_s=cap_s or 0.5, full_budget_s=math.inf,
                ibflow=[("default options", {}, None),
                        ("early stop at 1e-12·L₀ (explicit phase on the path)", {}, 1e-12)],
                scipy=[(1e-6, 1e-10), (1e-10, 1e-18)],
                scipy_methods=("DOP853", "LSODA", "Radau", "BDF"),
                gd_steps=(8e-3, 4e-3), gd_target_rel=1e-10,
                subset=dict(scipy=None, scipy_slow=C.sample(p.size, 2), gd=None))
        # Subsets: 10 evenly spaced members (all 5 shapes, the smallest and largest scale) for
        # the fast scipy methods; 3 (the first, middle and last member) for Radau and for the
        # implicit methods on the 4000-dim parameter ODE (a dense 4000×4000 LU per Jacobian);
        # GD: the middle scale (α = 2.1e-3) × all 5 shapes. GD's cost is ∝ flow time / step and
        # the flow time grows toward small scales, so the grid estimate (mean × 100) is only
        # as good as the middle scale is typical; the row says it is extrapolated.
        n_scales = len(np.unique(p.alphas))
        mid = np.flatnonzero(np.isclose(p.alphas, np.unique(p.alphas)[n_scales // 2]))
        return cls(
            small=False, cap_s=cap_s or 40.0, full_budget_s=25.0,
            ibflow=[("default options (Newton tail from the start)", {}, None),
                    ("Newton tail, switch at 1e-1·L₀ (the previous default)",
                     dict(stiff_switch=1e-1), None),
                    ("Newton tail, switch at 1e-4·L₀, path rtol 1e-10",
                     dict(stiff_switch=1e-4, rtol=1e-10, atol=1e-14), None),
                    ("Kvaerno5 tail (integrated), rtol 1e-6, switch 1e-8·L₀",
                     dict(stiff_solver=diffrax.Kvaerno5(), rtol=1e-6, atol=1e-10), None),
                    ("early stop at 1e-12·L₀ (path, Kvaerno5 tail, rtol 1e-6)",
                     dict(rtol=1e-6, atol=1e-10), 1e-12),
                    ("early stop at 1e-8·L₀ (path, rtol 1e-6)", dict(rtol=1e-6, atol=1e-10),
                     1e-8)],
            scipy=[(1e-6, 1e-10), (1e-8, 1e-14), (1e-10, 1e-18), (1e-12, 1e-24)],
            scipy_methods=("DOP853", "LSODA", "Radau", "BDF"),
            gd_steps=(2e-3, 1e-3, 5e-4), gd_target_rel=1e-16,
            subset=dict(scipy=C.sample(p.size, 10), scipy_slow=C.sample(p.size, 3), gd=mid))


@dataclasses.dataclass
class Point:
    """One (method, setting) of the work–precision table."""

    method: str
    setting: str
    wall_s: float | None = None  # grid wall time (measured, or extrapolated to all members)
    compile_s: float | None = None
    max_err: float | None = None
    median_err: float | None = None
    members: int = 0  # members measured
    total: int = 0  # members in the grid
    default: bool = False
    note: str = ""
    skipped: str = ""  # reason, when the setting was not completed

    @property
    def measured(self) -> bool:
        return self.members == self.total

    @property
    def how(self) -> str:
        if self.skipped:
            return "skipped"
        return "measured" if self.measured else f"extrapolated from {self.members} members"


def _errors(w, ref):
    d = C.rel_dist(w, ref)
    return float(np.max(d)), float(np.median(d))


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


@eqx.filter_jit
def _minimizers(alphas, shapes, X, y):
    d = X.shape[1]

    def one(a, s):
        model = ibflow.DiagonalNet.from_scale_shape(a, s, dim=d)
        m = ibflow.minimize_regularizer(ibflow.implicit_bias(model), X, y, throw=False)
        return m.w, m.feasibility, m.stationarity, m.status == ibflow.Status.converged

    return jax.vmap(one)(alphas, shapes)


def reference(p: C.Problem):
    """Theorem-1 minimizers (configs, d) and their certificate: max feasibility ‖Xw − y‖/‖y‖,
    max stationarity (distance of ∇Q(w) from range Xᵀ), converged count, and the max relative
    difference to the independent numpy dual Newton on 3 members."""
    t0 = time.perf_counter()
    w, feas, stat, ok = jax.block_until_ready(_minimizers(
        jnp.asarray(p.alphas), jnp.asarray(p.shapes), jnp.asarray(p.X), jnp.asarray(p.y)))
    seconds = time.perf_counter() - t0
    w = np.asarray(w)
    check = C.sample(p.size, 3)
    own = np.stack([reference_mod.benchmark_dual_newton(p.X, p.y, C.k_of(p.alphas[i],
                                                                         p.shapes[i]))
                    for i in check])
    return dict(w=w, seconds=seconds, converged=int(np.sum(ok)),
                feasibility=float(np.max(feas) / np.linalg.norm(p.y)),
                stationarity=float(np.max(stat)),
                cross_check=float(np.max(C.rel_dist(own, w[check]))))


# ---------------------------------------------------------------------------------------------
# ibflow
# ---------------------------------------------------------------------------------------------


def _sweep(p: C.Problem, options: dict, target_rel):
    opts = dict(options)
    if target_rel is not None:
        opts["target_loss"] = target_rel * 0.5 * float(np.mean(p.y**2))
    return sweep_with(p.X, p.y, p.alphas, p.shapes, **opts)


def run_ibflow(p, ref, s: Settings, log) -> list[Point]:
    points = []
    for label, options, target_rel in s.ibflow:
        # First call: compile (JAX's own compile events) + run; the second call is the warm
        # wall time a user sees when sweeping again in the same process.
        t0 = time.perf_counter()
        jax.block_until_ready(_sweep(p, options, target_rel))
        first = time.perf_counter() - t0
        compile_s = C.compile_seconds_since(t0)
        t0 = time.perf_counter()
        out = jax.block_until_ready(_sweep(p, options, target_rel))
        wall = time.perf_counter() - t0
        recompile = C.compile_seconds_since(t0)
        mx, md = _errors(out["w"], ref)
        ok = int(np.sum(out["status"] == 0))
        note = (f"{ok}/{p.size} converged; steps {out['steps'].mean():.0f} mean / "
                f"{out['steps'].max():.0f} max; first call {first:.3g} s")
        if recompile > 0.05:
            note += f"; the warm call still compiled {recompile:.2g} s (included)"
        default = not options and target_rel is None
        points.append(Point("ibflow.sweep", label, wall, compile_s, mx, md, p.size, p.size,
                            default=default, note=note))
        log(f"ibflow {label}: {wall:.3g} s, max err {mx:.2e}")
        if default:  # its peer at equal accuracy, and the roofline, side by side in this run
            points.append(run_dual_newton(p, ref, log))
            roofline[:] = [roofline_row(p, out, wall, log)]
    return points


def run_dual_newton(p, ref, log) -> Point:
    """The numpy damped-Newton loop on the dual of Theorem 1 (`wp_peers.dual_newton_solve`),
    every member, to ibflow's default target; timed twice, the second (warm BLAS) counts."""
    target = 1e-24 * 0.5 * float(np.mean(p.y**2))
    for _ in range(2):
        t0 = time.perf_counter()
        rs = [wp_peers.dual_newton_solve(p.X, p.y, a, s, target=target)
              for a, s in zip(p.alphas, p.shapes)]
        wall = time.perf_counter() - t0
    mx, md = _errors(np.stack([r["w"] for r in rs]), ref)
    its = np.array([r["iterations"] for r in rs])
    log(f"numpy dual Newton: {wall:.3g} s, max err {mx:.2e}")
    return Point(DUAL_NEWTON, "loss ≤ 1e-24·L₀ (ibflow's default target)", wall, None, mx, md,
                 p.size, p.size, note=f"{sum(r['converged'] for r in rs)}/{p.size} converged; "
                 f"Newton iterations {its.mean():.1f} mean / {its.max()} max")


def roofline_row(p, out, wall, log) -> dict:
    """Useful flops of the default sweep (its Newton iterations × `newton_iteration_flops`)
    over this machine's measured float64 matmul rate (a 1000 × 1000 product, jnp), as a
    fraction of the measured wall time."""
    from .ibflow_grid import newton_iteration_flops
    from .roofline import matmul_rate

    rate, _ = matmul_rate(1000, 1000, 1000)
    batch = int(out["chunk_size"])  # the Jacobian's flops depend on the path the batch takes
    flops = float(np.sum(out["steps"])) * newton_iteration_flops(p.n, p.d, batch)
    row = dict(shape=(p.n, p.d), batch=batch, flops=flops, rate=rate, roofline_s=flops / rate,
               wall_s=wall, fraction=flops / rate / wall)
    log(f"roofline: {row}")
    return row


# ---------------------------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------------------------


def _run_members(p, ref, idx, solve_one, cap_s):
    """Solve members `idx` in order until the cap. Returns (w list, seconds list, converged
    count, reason or '')."""
    start = time.perf_counter()
    ws, secs, ok = [], [], 0
    for i in idx:
        r = solve_one(int(i), start + cap_s)
        # (LSODA's Fortran loop does not see the deadline exception raised in the callback:
        # check the clock after each member too.)
        if r["over_time"] or r["w"] is None or time.perf_counter() > start + cap_s:
            done = (f" ({len(ws)} finished in {sum(secs):.3g} s)" if ws else "")
            return ws, secs, ok, (f"exceeded the {cap_s:g} s cap on member {len(ws) + 1} of "
                                  f"{len(idx)}, α={p.alphas[i]:.2g}, s={p.shapes[i]:g}{done}")
        if r.get("diverged"):
            return ws, secs, ok, f"diverged on member α={p.alphas[i]:.2g}, s={p.shapes[i]:g}"
        ws.append(r["w"])
        secs.append(r["seconds"])
        ok += bool(r["converged"])
    return ws, secs, ok, ""


def _peer_point(method, setting, p, ref, idx, solve_one, s: Settings, note=""):
    """Measure a peer setting on the members `idx` (None: all); when the subset predicts the
    whole grid within ``full_budget_s``, run the remaining members too (measured)."""
    idx = np.arange(p.size) if idx is None else np.asarray(idx)
    ws, secs, ok, why = _run_members(p, ref, idx, solve_one, s.cap_s)
    if why:
        return Point(method, setting, total=p.size, members=len(ws), skipped=why, note=note), None
    if len(idx) < p.size and np.mean(secs) * p.size <= s.full_budget_s:
        rest = np.setdiff1d(np.arange(p.size), idx)
        ws2, secs2, ok2, why = _run_members(p, ref, rest, solve_one, s.full_budget_s * 2)
        if not why:
            order = np.concatenate([idx, rest])
            w = np.empty((p.size, p.d))
            w[order] = np.stack(ws + ws2)
            idx, secs, ok = np.arange(p.size), secs + secs2, ok + ok2
            ws = list(w)
    w = np.stack(ws)
    mx, md = _errors(w, ref[idx])
    wall = float(np.sum(secs)) * p.size / len(idx)
    conv = f"{ok}/{len(idx)} reached the loss threshold"
    if len(idx) < p.size:
        conv += f"; members {list(map(int, idx))}; time = mean × {p.size}"
    return Point(method, setting, wall, None, mx, md, len(idx), p.size,
                 note="; ".join(x for x in (note, conv) if x)), w


def run_scipy(p, ref, s: Settings, log) -> list[Point]:
    L0 = 0.5 * float(np.mean(p.y**2))
    points = []
    for ode in ("reduced", "parameters"):
        for method in s.scipy_methods:
            implicit = method in wp_peers.IMPLICIT
            name = f"scipy {method} ({ode} ODE)"
            slow = method == "Radau" or (implicit and ode == "parameters")
            idx = s.subset["scipy_slow" if slow else "scipy"]
            blocked = ""
            for rtol, target_rel in s.scipy:
                setting = f"rtol {rtol:.0e}, loss ≤ {target_rel:.0e}·L₀"
                if blocked:
                    points.append(Point(name, setting, total=p.size, skipped=blocked))
                    continue

                def solve_one(i, deadline, ode=ode, method=method, rtol=rtol,
                              target_rel=target_rel):
                    return wp_peers.scipy_solve(p.X, p.y, p.alphas[i], p.shapes[i], ode=ode,
                                                method=method, rtol=rtol, atol=rtol * 1e-4,
                                                target=target_rel * L0, deadline=deadline)

                note = "analytic Jacobian" if implicit else ""
                pt, _ = _peer_point(name, setting, p, ref, idx, solve_one, s, note)
                points.append(pt)
                if pt.skipped:
                    blocked = f"a looser setting already {pt.skipped}"
                log(f"{name} {setting}: {pt.how} {pt.wall_s} s, max err {pt.max_err} "
                    f"{pt.skipped}")
    return points


def run_gd(p, ref, s: Settings, log) -> list[Point]:
    target = s.gd_target_rel * 0.5 * float(np.mean(p.y**2))
    points, ws, walls = [], {}, {}
    idx = s.subset["gd"]
    blocked = ""
    for lr in s.gd_steps:
        setting = f"step {lr:g}, loss ≤ {s.gd_target_rel:.0e}·L₀"
        if blocked:
            points.append(Point("GD loop (numpy)", setting, total=p.size, skipped=blocked))
            continue

        def solve_one(i, deadline, lr=lr):
            return wp_peers.gd_solve(p.X, p.y, p.alphas[i], p.shapes[i], lr=lr, target=target,
                                     deadline=deadline)

        # GD gets twice the cap (its steps halve: each setting costs 2× the previous one).
        pt, w = _peer_point("GD loop (numpy)", setting, p, ref, idx, solve_one,
                            dataclasses.replace(s, full_budget_s=0.0, cap_s=2 * s.cap_s),
                            note="untied net, loss checked every 200 steps")
        points.append(pt)
        if pt.skipped:
            blocked = f"a larger step already {pt.skipped}"
        else:
            ws[lr], walls[lr] = w, pt.wall_s
        log(f"GD {setting}: {pt.how} {pt.wall_s} s, max err {pt.max_err} {pt.skipped}")
    # Richardson: 2·w(η/2) − w(η) removes GD's first-order error (theory §8.2); costs both runs.
    members = p.size if idx is None else len(idx)
    for lr in s.gd_steps:
        half = lr / 2
        if not any(np.isclose(half, h) for h in ws):
            continue
        half = next(h for h in ws if np.isclose(half, h))
        if lr not in ws:
            continue
        w = 2 * ws[half] - ws[lr]
        mx, md = _errors(w, ref[np.arange(p.size) if idx is None else idx])
        points.append(Point("GD + Richardson", f"2·w({half:g}) − w({lr:g})",
                            walls[lr] + walls[half], None, mx, md, members, p.size,
                            note="time = both GD runs"))
    return points


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _f(v, digits=3):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:.{digits}g}" if 1e-3 <= abs(v) < 1e5 else f"{v:.2e}"


def ratio_rows(points: list[Point]):
    """For each accuracy level: the fastest ibflow setting and the fastest peer setting whose
    max error reaches it, and their ratio (peer / ibflow)."""
    done = [q for q in points if not q.skipped and q.max_err is not None]
    rows = []
    for level in LEVELS:
        ib = [q for q in done if q.method == "ibflow.sweep" and q.max_err <= level]
        # (the dual Newton loop is compared on its own line: it is not an ODE method)
        peer = [q for q in done if q.method not in ("ibflow.sweep", DUAL_NEWTON)
                and q.max_err <= level]
        bi = min(ib, key=lambda q: q.wall_s) if ib else None
        bp = min(peer, key=lambda q: q.wall_s) if peer else None
        ratio = bp.wall_s / bi.wall_s if bi and bp else None
        rows.append(dict(level=level, ibflow=bi, peer=bp, ratio=ratio,
                         passed=None if ratio is None else ratio >= 10))
    return rows


def run_processes(small: bool, log) -> dict:
    """Issue 14 target 2: ``python -m benchmarks.cache_probe --sweep`` in two fresh processes
    sharing a new cache directory (the first traces, compiles and writes; the second loads).
    Returns both processes' JSON lines."""
    import subprocess
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, IBFLOW_CACHE_DIR=cache)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        for name in ("first", "second"):
            cmd = [sys.executable, "-m", "benchmarks.cache_probe", "--sweep"]
            proc = subprocess.run(cmd + (["--quick"] if small else []), env=env, text=True,
                                  capture_output=True, timeout=900,
                                  cwd=os.path.dirname(os.path.dirname(__file__)))
            if proc.returncode != 0:
                raise RuntimeError(f"cache_probe failed: {proc.stderr[-2000:]}")
            out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            log(f"{name} process: {out[name]}")
    return out


def process_lines(processes: dict) -> list[str]:
    first, second = processes["first"], processes["second"]
    warm = min(first["warm_s"], second["warm_s"])
    ratio = second["first_call_s"] / warm
    return ["", "**Compile once across processes** (issue 14 target 2: a second process ≤ 2× a "
            "warm call): `python -m benchmarks.cache_probe --sweep` twice, one new cache "
            "directory; `ibflow.sweep` with default options.", "",
            "| process | import [s] | first call [s] | warm call [s] | traced the batch | "
            "compilation-cache hits |", "|---|---|---|---|---|---|",
            *(f"| {k} | {v['import_s']:.2f} | {v['first_call_s']:.2f} | {v['warm_s']:.2f} | "
              f"{'yes' if v['traced'] else 'no (loaded)'} | {v['hits']} |"
              for k, v in processes.items()),
            "", f"Second process first call / warm call: **{ratio:.2f}×** "
            f"({'PASS' if ratio <= 2 else 'FAIL'})."]


def markdown(points, ratios, ref, machine) -> str:
    lines = ["**Machine:** " + ", ".join(f"{k}: {v}" for k, v in machine.items()), "",
             f"**Reference:** {ref['how']}; {ref['converged']}/{ref['size']} certified "
             f"(max ‖Xw − y‖/‖y‖ = {ref['feasibility']:.1e}, max stationarity "
             f"{ref['stationarity']:.1e}); max relative difference to the independent numpy "
             f"dual Newton on 3 members {ref['cross_check']:.1e}; {ref['seconds']:.3g} s.", "",
             "| method | setting | wall [s] | compile [s] | max err | median err | "
             "measured / extrapolated | note |", "|---|---|---|---|---|---|---|---|"]
    for q in points:
        setting = f"**{q.setting}** (default)" if q.default else q.setting
        note = q.note if not q.skipped else "; ".join(x for x in (f"SKIPPED: {q.skipped}",
                                                                   q.note) if x)
        comp = ("0 (compiled by an earlier setting)" if q.compile_s is not None
                and q.compile_s < 0.05 else _f(q.compile_s))
        lines.append(f"| {q.method} | {setting} | {_f(q.wall_s)} | {comp} | "
                     f"{_f(q.max_err)} | {_f(q.median_err)} | {q.how} | {note} |")
    dual = next((q for q in points if q.method == DUAL_NEWTON), None)
    default = next((q for q in points if q.default), None)
    if dual and default:
        ratio = dual.wall_s / default.wall_s
        lines += ["", f"**Against the hand-written dual Newton loop** (flagship issue target 1: "
                  f"≥ 3× at equal accuracy ≤ 1e-10): numpy {_f(dual.wall_s)} s (max err "
                  f"{_f(dual.max_err)}) / ibflow default {_f(default.wall_s)} s (max err "
                  f"{_f(default.max_err)}) = **{ratio:.2f}×** "
                  f"({'PASS' if ratio >= 3 else 'FAIL'}), measured side by side in this run."]
    if roofline:
        r = roofline[0]
        lines += ["", f"**Roofline** (flagship issue target 1: ≥ 50 %): useful flops of the "
                  f"default sweep (its {_f(r['flops'] / p_newton_flops(r))} Newton iterations × "
                  f"({'n(n+1)d (pair table)' if r.get('batch', 1) >= pair_batch() else '2n²d'}"
                  f" + 2nd + n³/3 + 2n² + one field evaluation)) = {r['flops']:.3g}; this "
                  f"machine's float64 matmul rate (jnp, 1000 × 1000) {r['rate'] / 1e9:.3g} "
                  f"GFLOP/s; roofline time {_f(r['roofline_s'])} s against {_f(r['wall_s'])} s "
                  f"measured: **{100 * r['fraction']:.0f} %** "
                  f"({'PASS' if r['fraction'] >= 0.5 else 'FAIL'})."]
    lines += ["", "**Ratio to the best peer** (issue 14 target 1: ≥ 10×): at each accuracy "
              "level, the fastest peer setting whose max error reaches it vs the fastest ibflow "
              "setting that reaches it.", "",
              "| max error ≤ | fastest ibflow setting | ibflow wall [s] | fastest peer setting | "
              "peer wall [s] | peer / ibflow | ≥ 10× |", "|---|---|---|---|---|---|---|"]
    for r in ratios:
        ib, pe = r["ibflow"], r["peer"]
        lines.append(
            f"| {r['level']:.0e} | {ib.setting if ib else 'none reaches it'} | "
            f"{_f(ib.wall_s) if ib else ''} | "
            f"{f'{pe.method}, {pe.setting} ({pe.how})' if pe else 'no peer reaches it'} | "
            f"{_f(pe.wall_s) if pe else ''} | {_f(r['ratio'])} | "
            f"{'' if r['passed'] is None else ('PASS' if r['passed'] else 'FAIL')} |")
    return "\n".join(lines) + "\n"


def pair_batch() -> int:
    from ibflow._dynamics.diagonal import PAIR_TABLE_BATCH

    return PAIR_TABLE_BATCH


def p_newton_flops(row) -> float:
    """Flops of one Newton iteration of the roofline row's problem (for its iteration count)."""
    from .ibflow_grid import newton_iteration_flops

    return newton_iteration_flops(*row["shape"], row.get("batch", 1))


def plot(points, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [q for q in points if not q.skipped and q.max_err is not None]
    methods = list(dict.fromkeys(q.method for q in done))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    cmap = plt.get_cmap("tab10")
    for ax, key, label in ((axes[0], "max_err", "max relative error of the 100 limit points"),
                           (axes[1], "median_err", "median relative error")):
        for j, m in enumerate(methods):
            qs = sorted((q for q in done if q.method == m), key=lambda q: getattr(q, key))
            x = [max(getattr(q, key), 1e-17) for q in qs]
            y = [q.wall_s for q in qs]
            ib = m == "ibflow.sweep"
            # The line is the method's front: settings that no other setting of it beats in
            # both error and time (the others are drawn as points only).
            front, best = [], math.inf
            for xi, yi in zip(x, y):
                if yi < best:
                    front.append((xi, yi))
                    best = yi
            ax.plot(*zip(*front), "-", color="black" if ib else cmap(j % 10),
                    lw=2.8 if ib else 1.2, label=m, zorder=5 if ib else 2)
            for q, xi, yi in zip(qs, x, y):
                ax.plot(xi, yi, "*" if q.default else "o", ms=14 if q.default else 5,
                        color="black" if ib else cmap(j % 10),
                        mfc="none" if not q.measured else None, zorder=6 if ib else 3)
                if ib:  # which setting each ibflow point is
                    ax.annotate(q.setting.split(" (")[0], (xi, yi), textcoords="offset points",
                                xytext=(6, 3), fontsize=6.5, zorder=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("grid wall time [s] (warm; hollow = extrapolated from a subset)")
    axes[0].legend(fontsize=7, loc="best")
    skipped = [m for m in dict.fromkeys(q.method for q in points) if m not in methods]
    if skipped:
        fig.text(0.01, 0.01, "no setting finished within the cap: " + ", ".join(skipped),
                 fontsize=7)
    fig.suptitle(title + " — ★ = ibflow default options", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def small_problem() -> C.Problem:
    """The quick problem of ``python -m benchmarks --quick`` (d = 60, n = 12, 2 shapes ×
    3 scales): run in the same process, the default sweep reuses that run's compiled program."""
    return C.problem(True)


def run(small: bool, out_dir: str, *, cap_s: float | None = None, log=None,
        reuse_peers: bool = False) -> dict:
    """Run the benchmark, write ``work_precision.{md,png}`` under `out_dir`; returns
    ``dict(points, ratios, markdown, paths)``. With `reuse_peers`, only ibflow's rows are measured
    and the peers' rows are taken from the ``work_precision.json`` already in `out_dir` (their
    run's date is kept in the machine line)."""
    log = log or (lambda msg: print(f"[work_precision] {msg}", file=sys.stderr, flush=True))
    t_start = time.perf_counter()
    machine = C.machine()
    machine["persistent compilation cache"] = jax.config.jax_compilation_cache_dir or "off"
    p = small_problem() if small else C.problem(False)
    s = Settings.make(small, p, cap_s)
    machine["problem"] = ("small: " if small else "Figure 7.1: ") + p.describe()
    ref = reference(p) | dict(how="ibflow.minimize_regularizer", size=p.size)
    log(f"reference: {ref['seconds']:.3g} s, cross-check {ref['cross_check']:.1e}")
    points = run_ibflow(p, ref["w"], s, log)
    if reuse_peers:
        with open(os.path.join(out_dir, "work_precision.json")) as f:
            saved = json.load(f)
        points += [Point(**q) for q in saved["points"]
                   if q["method"] not in ("ibflow.sweep", DUAL_NEWTON)]
        machine["peers measured"] = saved["machine"].get("peers measured",
                                                         saved["machine"]["date (UTC)"])
    else:
        points += run_scipy(p, ref["w"], s, log)
        points += run_gd(p, ref["w"], s, log)
    ratios = ratio_rows(points)
    processes = run_processes(small, log)
    machine["benchmark wall time [s]"] = round(time.perf_counter() - t_start, 1)
    md = markdown(points, ratios, ref, machine) + "\n".join(process_lines(processes)) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    paths = dict(md=os.path.join(out_dir, "work_precision.md"),
                 png=os.path.join(out_dir, "work_precision.png"))
    paths["json"] = os.path.join(out_dir, "work_precision.json")
    with open(paths["md"], "w") as f:
        f.write(md)
    with open(paths["json"], "w") as f:
        json.dump(dict(machine=machine, reference={k: v for k, v in ref.items() if k != "w"},
                       points=[dataclasses.asdict(q) for q in points], processes=processes,
                       roofline=roofline[0] if roofline else None),
                  f, indent=1)
    plot(points, paths["png"], f"Work–precision, {machine['problem']} ({machine['date (UTC)']})")
    return dict(points=points, ratios=ratios, markdown=md, paths=paths, reference=ref)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.work_precision", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="tiny problem (smoke test), < 60 s")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--cap", type=float, default=None,
                    help="wall-time cap in seconds per setting of a peer method "
                         "(default 40, small 0.5)")
    ap.add_argument("--reuse-peers", action="store_true",
                    help="measure only ibflow's rows; take the peers' from DIR/work_precision.json")
    ap.add_argument("--replot", action="store_true",
                    help="only redraw DIR/work_precision.png from DIR/work_precision.json")
    args = ap.parse_args(argv)
    if args.replot:
        with open(os.path.join(args.out, "work_precision.json")) as f:
            saved = json.load(f)
        points = [Point(**q) for q in saved["points"]]
        m = saved["machine"]
        plot(points, os.path.join(args.out, "work_precision.png"),
             f"Work–precision, {m['problem']} ({m['date (UTC)']})")
        return 0
    res = run(args.small, args.out, cap_s=args.cap, reuse_peers=args.reuse_peers)
    print(res["markdown"])
    print("written: " + ", ".join(res["paths"].values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
