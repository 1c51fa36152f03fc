"""``python -m benchmarks [--quick] [--only NAME[,NAME...]] [--out DIR]``

Runs the comparisons of issue 7 side by side in one process on the Figure 7.1 problem
(theory §2.8: sparse regression d = 1000, n = 100, 5 shapes × 20 scales, unbiased diagonal net),
prints ONE markdown table, and writes it as ``DIR/latest.{md,csv,json}`` (default
``benchmarks/results``) with the machine description.

Benchmarks (``--only``): ibflow, gd, scipy, minimizer, scaling, roofline, work_precision (the
work–precision figure and table of issue 14, ``benchmarks.work_precision``; with ``--quick`` its
``--small`` version; writes ``DIR/work_precision.{md,png}``), general (issue 12's
general-model table, ``benchmarks/general_models.py``; also written as
``DIR/general_models.{md,png}``), gpu (issue 14's accelerator rows, ``benchmarks/gpu.py``: run
when JAX sees a GPU, writing ``DIR/gpu.{md,json,png}``; otherwise the rows quote the last
recorded GPU run, ``benchmarks/results/gpu.json``, and say so), compile (the first call of
``ibflow.integrate`` per model and flow, cold and with a filled compilation cache, in fresh
processes, ``benchmarks/compile.py``; with ``--quick`` the DiagonalNet case only; also written as
``DIR/compile.{md,json,png}``). Target rows need the benchmarks they compare; a target whose
inputs were not run is reported as "not run".
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import numpy as np

from . import _common as C
from . import compile as first_call
from . import (
    gd_loop,
    general_models,
    gpu,
    ibflow_grid,
    minimizer,
    reference,
    roofline,
    scaling,
    scipy_loop,
    work_precision,
)
from ._common import Row

NAMES = ("ibflow", "gd", "scipy", "minimizer", "scaling", "roofline", "work_precision", "general",
         "gpu", "compile")


class Settings:
    def __init__(self, quick: bool):
        self.quick = quick
        self.runs = 1 if quick else 3
        self.gd_budget_s = 1.0 if quick else 60.0
        self.scipy_sample = 2 if quick else 5
        self.scipy_cap_s = 1.0 if quick else 20.0
        self.scipy_exact_cap_s = 1.0 if quick else 20.0
        self.min_sizes = [(40, 8)] if quick else [(100, 10), (1000, 100)]
        self.slsqp_cap_s = 1.0 if quick else 30.0
        # Quick mode reuses the quick problem's compiled grid (same shapes): no new compiles.
        self.scaling_configs = [6] if quick else [1, 10, 100, 1000, 10_000]
        self.scaling_problem = (60, 12) if quick else (100, 10)
        self.scaling_dims = [60] if quick else [300, 1000, 3000, 10_000]
        self.scaling_dim_configs = 6 if quick else 10
        self.scaling_n = 12 if quick else 100
        self.general_cap_s = 0.5 if quick else 90.0


class Context:
    """Lazily computed, shared measurements (so --only runs just what a benchmark needs)."""

    def __init__(self, s: Settings):
        self.s = s
        self.p = C.problem(s.quick)

    @functools.cached_property
    def reference(self):
        t0 = time.perf_counter()
        w, how = reference.minimizers(self.p.X, self.p.y, self.p.alphas, self.p.shapes)
        return dict(w=w, how=how, seconds=time.perf_counter() - t0)

    @functools.cached_property
    def ibflow(self):
        return ibflow_grid.run(self.p, self.reference["w"], runs=self.s.runs)

    @functools.cached_property
    def gd(self):
        return gd_loop.run(self.p, self.ibflow["vmap_gd_target"]["time"], self.reference["w"],
                           budget_s=self.s.gd_budget_s)

    @functools.cached_property
    def scipy(self):
        p = self.p
        idx = C.sample(p.size, self.s.scipy_sample)
        out = {}
        for ode in ("parameters", "reduced"):
            for method in ("RK45", "DOP853"):
                per = [scipy_loop.solve(p.X, p.y, p.alphas[i], p.shapes[i], ode=ode,
                                        method=method, target=C.GD_TARGET,
                                        cap_s=self.s.scipy_cap_s) for i in idx]
                out[(ode, method)] = dict(index=idx, runs=per)
        # The exact-limit target with the strongest baseline, on the easiest sampled config.
        i = idx[-1]
        r = scipy_loop.solve(p.X, p.y, p.alphas[i], p.shapes[i], ode="reduced", method="DOP853",
                             target=ibflow_grid.exact_target(p.y),
                             cap_s=self.s.scipy_exact_cap_s)
        out["exact"] = dict(index=i, run=r)
        return out


def _dist_summary(dist) -> str:
    dist = np.asarray(dist, dtype=float)
    return f"median {np.median(dist):.1e}, max {np.max(dist):.1e}"


def _steps_summary(steps) -> str:
    steps = np.asarray(steps, dtype=float)
    return f"{steps.mean():.0f} mean / {steps.max():.0f} max"


def rows_ibflow(ctx: Context) -> list[Row]:
    p, r = ctx.p, ctx.ibflow
    rows = [Row("0", f"reference: Theorem-1 minimizers ({ctx.reference['how']})", p.size,
                run_s=ctx.reference["seconds"], note="wall incl. compile; dual form of [AZ-T1]")]
    check = C.sample(p.size, 3)
    own = np.stack([reference.benchmark_dual_newton(p.X, p.y, C.k_of(p.alphas[i], p.shapes[i]))
                    for i in check])
    rows.append(Row("0", "reference cross-check: benchmark_dual_newton (numpy) vs reference",
                    len(check), dist=float(C.rel_dist(own, ctx.reference["w"][check]).max()),
                    note="independent implementation; dist = max relative difference"))
    s = r["single"]
    rows.append(Row("3", "ibflow single flow (jit), exact limit", len(s["index"]),
                    compile_s=s["compile_s"], run_s=float(np.sum(s["run_s"])),
                    per_config_s=float(np.mean(s["run_s"])), steps=_steps_summary(s["steps"]),
                    dist=float(np.max(s["dist"])),
                    note=f"sampled configs {list(map(int, s['index']))}, one after another; "
                         f"{_dist_summary(s['dist'])}"))
    v = r["vmap"]
    rows.append(Row("3", "ibflow grid, jax.vmap on one device, exact limit", p.size,
                    compile_s=v["timing"].compile_s, run_s=v["timing"].run_s,
                    per_config_s=v["timing"].run_s / p.size, steps=_steps_summary(v["steps"]),
                    dist=float(np.max(v["dist"])),
                    note=f"{v['converged']}/{p.size} converged; {_dist_summary(v['dist'])}; "
                         f"median of {v['timing'].runs} runs"))
    if "sweep" in r:
        w = r["sweep"]
        t = w["timing"]
        rows.append(Row("3", "ibflow grid, ibflow.sweep (cost-ordered chunks), exact limit",
                        p.size, compile_s=t.compile_s, run_s=t.run_s,
                        per_config_s=t.run_s / p.size, steps=_steps_summary(w["steps"]),
                        dist=float(np.max(w["dist"])),
                        note=f"{w['converged']}/{p.size} converged; {_dist_summary(w['dist'])}; "
                             f"median of {t.runs} runs; "
                             f"lockstep efficiency {w['lockstep_efficiency']:.2f}; each call "
                             f"re-compiles {t.recompile_s:.1f} s (not in run)"))
    else:
        rows.append(Row("3", "ibflow grid, ibflow.sweep", note="pending: ibflow.sweep missing"))
    e = r["default"]
    rows.append(Row("3", "ibflow grid, ibflow.sweep with DEFAULT options (Newton tail), the limit",
                    p.size, compile_s=e["timing"].compile_s, run_s=e["timing"].run_s,
                    per_config_s=e["timing"].run_s / p.size, steps=_steps_summary(e["steps"]),
                    dist=float(np.max(e["dist"])),
                    note=f"{e['converged']}/{p.size} converged; {_dist_summary(e['dist'])}; "
                         f"median of {e['timing'].runs} runs; steps = Newton iterations"))
    g = r["vmap_gd_target"]
    rows.append(Row("3", "ibflow grid, jax.vmap, Tsit5 only, to GD's loss 1e-10", p.size,
                    compile_s=g["timing"].compile_s, run_s=g["timing"].run_s,
                    per_config_s=g["timing"].run_s / p.size, steps=_steps_summary(g["steps"]),
                    dist=float(np.max(g["dist"])),
                    note=f"1 call (run = wall − compile); gives the flow times T_i for the GD "
                         "extrapolation; "
                         f"{_dist_summary(g['dist'])}"))
    # --- profile of the vmapped grid --------------------------------------------------------
    prof, total = r["profile"], v["timing"].run_s
    s1 = prof["phase1_steps"]
    s2 = np.maximum(v["steps"] - s1, 0)
    vf_s = prof["vector_field_batch_s"] * ibflow_grid.TSIT5_STAGES * s1.max()
    phase2_s = max(total - prof["phase1_s"], 0.0)
    rows += [
        Row("3p", "profile: compile (vmapped grid)", p.size, compile_s=v["timing"].compile_s,
            value=v["timing"].compile_s / (v["timing"].compile_s + total),
            note="value = share of compile + one run"),
        Row("3p", "profile: phase 1 alone, explicit Tsit5 to L ≤ 1e16·target (1 call)", p.size,
            run_s=prof["phase1_s"], steps=_steps_summary(s1), value=prof["phase1_s"] / total,
            note=f"value = share of the grid run; lockstep waste "
                 f"{1 - s1.mean() / s1.max():.0%} (mean/max steps)"),
        Row("3p", "profile: phase 1, batched vector field (6 evals × max steps)", p.size,
            run_s=vf_s, value=vf_s / total,
            note=f"one batched evaluation {prof['vector_field_batch_s'] * 1e3:.3g} ms; phase-1 "
                 f"solver overhead = {max(prof['phase1_s'] - vf_s, 0):.3g} s"),
        Row("3p", "profile: phase 1 ideal = useful vector-field work only", p.size,
            run_s=prof["vector_field_batch_s"] * ibflow_grid.TSIT5_STAGES * s1.sum() / p.size,
            value=prof["vector_field_batch_s"] * ibflow_grid.TSIT5_STAGES * s1.sum() / p.size
            / total, note="Σ member steps × 6 evals × (batched eval time / members): no lockstep "
                          "waste, no solver overhead"),
        Row("3p", "profile: phase 2, implicit Kvaerno5 tail (total − phase 1)", p.size,
            run_s=phase2_s, steps=_steps_summary(s2), value=phase2_s / total,
            note=f"lockstep waste {1 - s2.mean() / max(s2.max(), 1):.0%}; Jacobians + Newton "
                 "solves of an n×n system per stage"),
        Row("3p", "profile: lockstep waste, whole grid in one vmap", p.size,
            value=1 - (s1.mean() + s2.mean()) / (s1.max() + max(s2.max(), 1)),
            note="1 − Σ mean steps / Σ max steps over the two phases"),
    ]
    if "sweep" in r:
        rows.append(Row("3p", "profile: lockstep waste, ibflow.sweep", p.size,
                        value=1 - r["sweep"]["lockstep_efficiency"],
                        note="1 − sweep metadata 'lockstep_efficiency' (chunk padding included)"))
    return rows


def rows_gd(ctx: Context) -> list[Row]:
    p, g = ctx.p, ctx.gd
    rows = [Row("1", "GD loop (numpy), one iteration", 1, run_s=g["per_iteration_s"],
                note="median of 3 × 2000 iterations, untied net, step 1e-3")]
    ran = g["ran"]
    if ran:
        secs = np.array([e["seconds"] for e in ran])
        iters = np.array([e["iterations"] for e in ran], dtype=float)
        pred = np.array([e["predicted"] for e in ran])
        dist = np.array([e["dist"] for e in ran])
        ok = sum(e["converged"] for e in ran)
        big = iters >= 10_000  # the 1000-iteration check granularity dominates below that
        agree = (f"measured/predicted iterations {np.min(iters[big] / pred[big]):.3f}–"
                 f"{np.max(iters[big] / pred[big]):.3f} where ≥ 1e4" if big.any() else "")
        rows.append(Row("1", "GD loop, the configs that fit the budget, run to the end",
                        len(ran), run_s=float(secs.sum()), per_config_s=float(secs.mean()),
                        steps=_steps_summary(iters), dist=float(dist.max()),
                        note=f"{ok}/{len(ran)} converged; {_dist_summary(dist)}; {agree}; "
                             "cheapest configs first (large k)"))
        for e in (ran[0], ran[len(ran) // 2], ran[-1]):
            i = e["index"]
            rows.append(Row("1", f"GD loop, config α={p.alphas[i]:.2g}, s={p.shapes[i]:g}", 1,
                            run_s=e["seconds"], per_config_s=e["seconds"], steps=e["iterations"],
                            dist=e["dist"],
                            note=f"{'converged' if e['converged'] else 'NOT converged'} "
                                 f"(loss {e['loss']:.1e}); predicted T/η = {e['predicted']:.0f} "
                                 "iterations; loss checked every 1000"))
    pred = g["predicted_iterations"]
    rows.append(Row("1", "GD loop, whole grid to loss 1e-10 (EXTRAPOLATED)", p.size,
                    run_s=g["grid_s_extrapolated"], per_config_s=g["grid_s_extrapolated"] / p.size,
                    steps=f"{pred.mean():.3g} mean / {pred.max():.3g} max",
                    note="s/iteration × Σ T_i/η (T_i = flow time to loss 1e-10 from ibflow); "
                         f"slowest config ≈ {g['worst_config_s_extrapolated'] / 3600:.2g} h"))
    return rows


def _scipy_grid_estimate(ctx, runs):
    secs = np.array([r["seconds"] for r in runs])
    capped = any(r["capped"] for r in runs)
    return secs.mean() * ctx.p.size, capped


def rows_scipy(ctx: Context) -> list[Row]:
    p, sc, ref = ctx.p, ctx.scipy, ctx.reference["w"]
    rows = []
    for (ode, method), e in ((k, v) for k, v in sc.items() if k != "exact"):
        runs = e["runs"]
        est, capped = _scipy_grid_estimate(ctx, runs)
        dists = [float(C.rel_dist(r["w"], ref[i])) for r, i in zip(runs, e["index"])
                 if r["w"] is not None]
        steps = [r["steps"] for r in runs if not r["capped"]]
        rows.append(Row(
            "2", f"scipy solve_ivp {method}, {ode} ODE, to loss 1e-10 (grid EXTRAPOLATED)",
            p.size, run_s=est, per_config_s=est / p.size,
            steps=_steps_summary(steps) if steps else "",
            dist=max(dists) if dists else None,
            note=(f"≥ (some configs capped at {ctx.s.scipy_cap_s:g} s); " if capped else "")
                 + f"mean over {len(runs)} sampled configs {list(map(int, e['index']))} × "
                 f"{p.size}; per config "
                 + ", ".join(f"{r['seconds']:.2g}" for r in runs) + " s; rtol 1e-10, atol 1e-14"))
    ex = sc["exact"]
    r, i = ex["run"], ex["index"]
    rows.append(Row(
        "2", "scipy solve_ivp DOP853, reduced ODE, to ibflow's exact target", 1,
        run_s=r["seconds"], per_config_s=r["seconds"],
        dist=float(C.rel_dist(r["w"], ref[i])) if r["w"] is not None else None,
        note=(f"DID NOT REACH the target in {ctx.s.scipy_exact_cap_s:g} s (explicit solver at "
              "its stability limit in the stiff tail); " if r["capped"] else "")
        + f"config α={p.alphas[i]:.2g}, s={p.shapes[i]:g}"))
    return rows


def rows_minimizer(ctx: Context) -> list[Row]:
    res = minimizer.run(ctx.s.min_sizes, runs=ctx.s.runs, cap_s=ctx.s.slsqp_cap_s)
    rows = []
    for e in res:
        tag = f"d={e['d']}, n={e['n']}"
        if e["available"]:
            t = e["ibflow"]["timing"]
            rows.append(Row("4", f"minimizer: ibflow dual Newton, {tag}", 1, compile_s=t.compile_s,
                            run_s=t.run_s, steps=e["ibflow"]["steps"], dist=e["ibflow"]["dist"],
                            note="dist vs benchmark_dual_newton; α=1e-4, s=0.5"))
        else:
            rows.append(Row("4", f"minimizer: ibflow dual Newton, {tag}",
                            note="pending: ibflow.minimize_regularizer missing"))
        sl = e["slsqp"]
        rows.append(Row("4", f"minimizer: scipy SLSQP (tol 1e-7, exact gradients), {tag}", 1,
                        run_s=sl["run_s"], steps=sl["steps"], dist=sl["dist"],
                        note=("≥: stopped at the " + f"{ctx.s.slsqp_cap_s:g} s cap; "
                              if sl["capped"] else "")
                        + f"success={sl['success']}; median of {sl['runs']} run(s)"))
        ctx.__dict__.setdefault("minimizer_results", []).append(e)
    return rows


def rows_scaling(ctx: Context) -> list[Row]:
    s = ctx.s
    res = scaling.run(s.scaling_configs, s.scaling_problem, s.scaling_dims,
                      s.scaling_dim_configs, s.scaling_n, runs=0)
    rows = []
    for e in res["configs"]:
        t = e["timing"]
        rows.append(Row("5", f"scaling: configs = {e['count']} (d={e['d']}, n={e['n']}, CPU)",
                        e["count"], compile_s=t.compile_s, run_s=t.run_s,
                        per_config_s=t.run_s / e["count"],
                        steps=f"{e['steps_mean']:.0f} mean / {e['steps_max']:.0f} max",
                        value=e["count"] / t.run_s,
                        note=f"value = flows/s; {e['converged']}/{e['count']} converged; "
                             "configs tiled from the Fig. 7.1 grid; 1 call, run = wall − compile"))
    for e in res["dims"]:
        t = e["timing"]
        rows.append(Row("5", f"scaling: d = {e['d']} (n={e['n']}, {e['count']} configs, CPU)",
                        e["count"], compile_s=t.compile_s, run_s=t.run_s,
                        per_config_s=t.run_s / e["count"],
                        steps=f"{e['steps_mean']:.0f} mean / {e['steps_max']:.0f} max",
                        note=f"{e['converged']}/{e['count']} converged; 1 call, run = wall − "
                             "compile"))
    ctx.__dict__["scaling_results"] = res
    return rows


def rows_roofline(ctx: Context) -> list[Row]:
    p, r = ctx.p, ctx.ibflow
    grid_key = "sweep" if "sweep" in r else "vmap"
    rows = []
    for key in ("vmap", grid_key) if grid_key != "vmap" else ("vmap",):
        e = r[key]
        flops = (float(np.sum(e["steps"])) * ibflow_grid.TSIT5_STAGES
                 * ibflow_grid.vector_field_flops(p.n, p.d))
        rate = flops / e["timing"].run_s
        ctx.__dict__.setdefault("useful_rate", {})[key] = rate
        rows.append(Row("6", f"roofline: useful rate of the grid ({key})", p.size,
                        run_s=e["timing"].run_s, value=rate / 1e9,
                        note=f"value = GFLOP/s; {flops:.3g} useful flops = Σ steps × 6 × "
                             f"{ibflow_grid.vector_field_flops(p.n, p.d)} flops/eval"))
    if "default" in r:  # the default sweep: Newton iterations, not integrated steps
        e = r["default"]
        per = ibflow_grid.newton_iteration_flops(p.n, p.d, int(e.get("chunk_size", 1)))
        flops = float(np.sum(e["steps"])) * per
        rate = flops / e["timing"].run_s
        ctx.__dict__["default_rate"] = rate
        rows.append(Row("6", "roofline: useful rate of the default sweep (Newton tail)", p.size,
                        run_s=e["timing"].run_s, value=rate / 1e9,
                        steps=f"{np.mean(e['steps']):.2f} mean / {np.max(e['steps'])} max",
                        dist=float(np.max(e["dist"])),
                        note=f"value = GFLOP/s; {flops:.3g} useful flops = Σ Newton iterations × "
                             f"{per} flops (Jacobian 2n²d, Cholesky, solves, one trial "
                             f"evaluation; chord steps not counted); median of "
                             f"{e['timing'].runs} warm calls; {e['converged']}/{p.size} "
                             "converged"))
    m_rate, m_s = roofline.matmul_rate(p.size, p.n, p.d, chained=True)
    big = 512 if p.quick else 2048
    b_rate, b_s = roofline.matmul_rate(big, big, big, runs=5)
    ctx.__dict__["matmul_rate"] = max(m_rate, b_rate)
    rows.append(Row("6", f"roofline: float64 matmul ({p.size}×{p.n})@({p.n}×{p.d}), the grid's "
                    "Xᵀν shape", 1, run_s=m_s, value=m_rate / 1e9,
                    note="value = GFLOP/s; 50 chained pairs (a·X)·Xᵀ in one compiled loop"))
    rows.append(Row("6", f"roofline: float64 matmul {big}×{big}×{big}", 1, run_s=b_s,
                    value=b_rate / 1e9, note="value = GFLOP/s"))
    return rows


def rows_work_precision(ctx: Context) -> list[Row]:
    res = work_precision.run(ctx.s.quick, ctx.out_dir)
    ctx.__dict__["work_precision_markdown"] = res["markdown"]
    rows = []
    for r in res["ratios"]:
        ib, pe = r["ibflow"], r["peer"]
        note = (f"fastest peer: {pe.method}, {pe.setting} ({pe.how}, {pe.wall_s:.3g} s); "
                if pe else "no peer reaches it; ")
        note += (f"fastest ibflow: {ib.setting} ({ib.wall_s:.3g} s)" if ib
                 else "no ibflow setting reaches it")
        rows.append(Row("7", f"work–precision: best peer / ibflow at max error ≤ {r['level']:.0e}",
                        run_s=ib.wall_s if ib else None,
                        dist=ib.max_err if ib else None, value=r["ratio"], target="≥ 10×",
                        passed=r["passed"], note=note))
    return rows


def rows_general(ctx: Context) -> list[Row]:
    results = general_models.run(ctx.s.quick, cap_s=ctx.s.general_cap_s,
                                 runs=1 if ctx.s.quick else ctx.s.runs)
    ctx.__dict__["general_results"] = results
    return general_models.rows(results)


def rows_compile(ctx: Context) -> list[Row]:
    keys = first_call.QUICK if ctx.s.quick else tuple(first_call.CASES)
    results = first_call.run(keys)
    ctx.__dict__["compile_results"] = results
    return first_call.summary_rows(results)


def _target(name, ratio, target, passed, note="") -> Row:
    return Row("T", name, value=ratio, target=target,
               passed=None if passed is None else bool(passed), note=note)


#: The last run of `benchmarks.gpu` on a GPU, quoted when this run has none.
RECORDED_GPU = os.path.join(os.path.dirname(__file__), "results", "gpu.json")


def rows_gpu(ctx: Context) -> list[Row]:
    if C.has_gpu():
        info = gpu.run(small=ctx.s.quick, chunks=[16, 400] if ctx.s.quick else gpu.CHUNKS,
                       budget_s=300.0, cpu_reference=None, out_dir=ctx.out_dir)
        tag = "this run"
    elif os.path.isfile(RECORDED_GPU):
        with open(RECORDED_GPU) as f:
            info = json.load(f)
        tag = (f"no GPU in this run: recorded {info['date']} on {info['device']} by "
               "`python -m benchmarks.gpu` (benchmarks/results/gpu.md)")
    else:
        return [Row("5", "GPU: the grid with 10⁴ configurations", note="no GPU available and "
                    "no recorded GPU run (python -m benchmarks.gpu on a GPU writes one)")]
    ctx.__dict__["gpu_results"] = (info, tag)
    rows = []
    for e in info["by_chunk"]:
        rows.append(Row("5", f"GPU: {info['configs']} configs, d={info['d']}, chunk "
                        f"{e['chunk']} ({info['device']})", info["configs"],
                        compile_s=e["compile_s"], run_s=e["run_s"],
                        per_config_s=e["run_s"] / info["configs"],
                        steps=f"{e['steps_mean']:.2f} mean / {e['steps_max']} max",
                        dist=info["precision"]["max"], value=e["flows_per_s"],
                        note=f"value = flows/s; {e['converged']}/{info['configs']} converged; "
                             f"{e['fraction_of_f64']:.1%} of the float64 matmul rate; " + tag))
    return rows


def rows_targets(ctx: Context, ran: set[str]) -> list[Row]:
    rows = []
    have = ctx.__dict__
    grid_key = None
    if "ibflow" in have:
        use_sweep = ibflow_grid.solve_grid is ibflow_grid.sweep_grid and "sweep" in ctx.ibflow
        grid_key = "sweep" if use_sweep else "vmap"
        grid_s = ctx.ibflow[grid_key]["timing"].run_s
        label = "ibflow.sweep" if grid_key == "sweep" else "vmapped grid"
    if grid_key and "gd" in have:
        ratio = ctx.gd["grid_s_extrapolated"] / grid_s
        rows.append(_target(f"grid to the exact limit ({label}) vs GD loop (extrapolated)",
                            ratio, "≥ 1000×", ratio >= 1000,
                            "GD stops at loss 1e-10, ibflow at the exact limit"))
        ran_gd = ctx.gd["ran"]
        if ran_gd:
            idx = [e["index"] for e in ran_gd]
            gd_d = np.array([e["dist"] for e in ran_gd])
            ib_d = ctx.ibflow[grid_key]["dist"][idx]
            ratios = gd_d / ib_d
            rows.append(_target("limit points closer to argmin Q than GD's (same configs)",
                                float(np.median(ratios)), "≥ 100×", bool(ratios.min() >= 100),
                                f"median ratio; min {ratios.min():.3g} over {len(idx)} configs "
                                "GD finished"))
    else:
        rows.append(_target("grid vs GD loop", None, "≥ 1000×", None, "not run"))
    if grid_key and "scipy" in have:
        best = min(((_scipy_grid_estimate(ctx, e["runs"])[0], k) for k, e in ctx.scipy.items()
                    if k != "exact"))
        ratio = best[0] / grid_s
        rows.append(_target(f"grid to the exact limit ({label}) vs fastest scipy loop "
                            f"({best[1][1]}, {best[1][0]})", ratio, "≥ 10×", ratio >= 10,
                            "scipy stops at loss 1e-10 (it cannot reach the exact target), "
                            "grid extrapolated from samples"))
    else:
        rows.append(_target("grid vs scipy loop", None, "≥ 10×", None, "not run"))
    for e in have.get("minimizer_results", []):
        if not e["available"]:
            rows.append(_target(f"minimizer d={e['d']}, n={e['n']}", None, "", None, "pending"))
            continue
        t = e["ibflow"]["timing"].run_s
        if (e["d"], e["n"]) == (1000, 100):
            rows.append(_target("minimizer at d=1000, n=100: run time [ms]", t * 1e3, "≤ 50 ms",
                                t <= 0.05))
        ratio = e["slsqp"]["run_s"] / t
        lower = "≥ " if e["slsqp"]["capped"] else ""
        target = "≥ 1000×" if (e["d"], e["n"]) == (100, 10) else "(report)"
        rows.append(_target(f"minimizer vs SLSQP at d={e['d']}, n={e['n']}", ratio, target,
                            ratio >= 1000 if (e["d"], e["n"]) == (100, 10) else None,
                            f"{lower}ratio of medians"))
    if "default_rate" in have and "matmul_rate" in have:
        frac = ctx.default_rate / ctx.matmul_rate
        rows.append(_target("roofline: useful rate of the default sweep / measured float64 "
                            "matmul rate", frac, "≥ 25%", frac >= 0.25,
                            "denominator: the faster of the two matmuls of §6"))
    if "useful_rate" in have and "matmul_rate" in have:
        frac = max(ctx.useful_rate.values()) / ctx.matmul_rate
        rows.append(_target("roofline of the integrated path (exact target passed: Tsit5 "
                            "flops only)", frac, "(report)", None,
                            "denominator: the faster of the two matmuls of §6"))
    else:
        rows.append(_target("roofline", None, "≥ 25%", None, "not run"))
    if "gpu_results" in have:
        info, tag = ctx.gpu_results
        best = min(info["by_chunk"], key=lambda e: e["run_s"])
        rows.append(_target(f"GPU: {info['configs']} flows at d={info['d']}, warm call [s]",
                            best["run_s"], "≤ 10 s", best["run_s"] <= 10,
                            f"{info['device']}, chunk {best['chunk']}: {best['flows_per_s']:.0f} "
                            f"flows/s, {best['fraction_of_f64']:.1%} of its float64 matmul rate; "
                            + tag))
        rows.append(_target("GPU limits vs the CPU's (max relative difference)",
                            info["vs_host_cpu"], "≤ 1e-10", info["vs_host_cpu"] <= 1e-10,
                            f"{info['cpu_members']} members on the same host's CPU; " + tag))
    else:
        rows.append(_target("GPU: 10⁴-config grid at d=1000", None, "≤ 10 s", None,
                            "not run"))
    if "compile_results" in have:
        rows += first_call.target_rows(ctx.compile_results)
    else:
        rows.append(_target("first call of integrate (cold ≤ 10 s, cached ≤ 2 s)", None,
                            "≤ 10 s", None, "not run"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--only", default=",".join(NAMES),
                    help=f"comma-separated subset of {', '.join(NAMES)}")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"),
                    help="directory for latest.{md,csv,json}")
    args = ap.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(only) - set(NAMES)
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {', '.join(NAMES)}")
    machine = C.machine()
    ctx = Context(Settings(args.quick))
    ctx.out_dir = args.out
    machine["problem"] = ("quick: " if args.quick else "Figure 7.1: ") + ctx.p.describe()
    builders = {"ibflow": rows_ibflow, "gd": rows_gd, "scipy": rows_scipy,
                "minimizer": rows_minimizer, "scaling": rows_scaling, "roofline": rows_roofline,
                "work_precision": rows_work_precision,
                "general": rows_general, "gpu": rows_gpu, "compile": rows_compile}
    rows: list[Row] = []
    t0 = time.perf_counter()
    for name in NAMES:
        if name in only:
            t = time.perf_counter()
            rows += builders[name](ctx)
            print(f"[benchmarks] {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr,
                  flush=True)
    rows += rows_targets(ctx, set(only))
    machine["benchmark wall time [s]"] = round(time.perf_counter() - t0, 1)
    paths = C.write(rows, machine, args.out)
    if "general_results" in ctx.__dict__:
        general = general_models.write(ctx.general_results, machine, args.out, args.quick)
        paths.update({f"general_{k}": v for k, v in general.items()})
    if "compile_results" in ctx.__dict__:
        command = " ".join(["python -m benchmarks", *(sys.argv[1:] if argv is None else argv)])
        compiled = first_call.write(ctx.compile_results, machine, args.out, command)
        paths.update({f"compile_{k}": v for k, v in compiled.items()})
    print(C.markdown(rows, machine))
    # The two figures' own tables follow the summary, so one run prints everything it wrote.
    if "work_precision_markdown" in ctx.__dict__:
        print("\n" + ctx.work_precision_markdown)
    if "general_results" in ctx.__dict__:
        print("\n" + general_models.table(ctx.general_results))
    if "compile_results" in ctx.__dict__:
        print("\n" + first_call.markdown(ctx.compile_results))
    print("written: " + ", ".join(paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
