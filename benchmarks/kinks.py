"""Issue 13, items 2 and 3: exact kinked flows vs the researcher's workaround, side by side,
and one sliding neuron at the CLI's size.

``python -m benchmarks.kinks [--quick] [--seeds 0,1,...] [--out DIR]``

Problems: docs/theory §8.2's sliding setting (leaky neuron, γ = 0.3, n = 8, d = 30, α = 1, s = 0,
mixed-sign realizable targets); only problems on which the flow slides (``KinkReport.slides >
0``) are kept. For each:

- ibflow: `ibflow.integrate` (through the kinks) to the default target; compile time and the
  median run time.
- ibflow's own accuracy knob (`LADDER`: looser rtol and target, the same compiled program):
  run time and distance of the limit to the default's; the cheapest setting within 1e-7 gives
  ibflow's time "to reach that accuracy" (issue 13 item 2), next to the default's. The
  default's limit is compared with argmin Q (Theorem 4's dual/KKT minimizer).
- GD+R: full-batch GD with steps ``η₀, η₀/2, η₀/4, …`` run to a loss target, and the
  Richardson extrapolation ``2w(η/2) − w(η)`` (docs/theory §8.2, "Independent reference"). Its time
  to reach 1e-7 relative agreement with ibflow's limit is the wall time of all GD runs up to
  the first halving that gets there (a researcher does not know in advance which η suffices),
  each run's time the median of `GD_PASSES` passes. Its loss target is, like ibflow's
  setting, the cheapest that gets there, among the ladder's targets ("ratio at 1e-7"); at
  ibflow's default target (1e-24·L₀) GD+R runs ~1.5× longer ("ratio (default)", against
  ibflow's default).

Then one sliding leaky neuron at d = 1000, n = 100, random
realizable mixed-sign targets, α = 1, s = 0 (``--quick``: the comparison's size, so it reuses its
compiled program): ibflow's compile and run times, its events and the
distance of its limit to argmin Q (Theorem 4's dual/KKT minimizer, the independent reference).

Prints the markdown tables and writes them with the machine as ``DIR/kinks.md`` (default
``benchmarks/results``) with the figure ``DIR/kinks.png``: per problem, the GD and GD+R errors
against wall time, with ibflow's time marked.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp

import ibflow

from . import _common as C

GAMMA, N, D, ALPHA, SHAPE = 0.3, 8, 30, 1.0, 0.0
AGREEMENT = 1e-7
#: Passes over GD's step halvings; each run's time is its median over the passes.
GD_PASSES = 3
#: ibflow's accuracy knob, loosest first: (rtol, target loss / (½·mean y²)), atol = 1e-4·rtol
#: (the default's ratio). The default is rtol 1e-10 to 1e-24 of that scale.
LADDER = ((1e-5, 1e-14), (1e-6, 1e-16), (1e-7, 1e-16), (1e-8, 1e-18))


def problem(key, n=N, d=D):
    kx, km, kt = jax.random.split(key, 3)
    X = jax.random.normal(kx, (n, d))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(ALPHA, SHAPE, dim=d, slope=GAMMA, key=km)
    sign = jnp.sign(m.a)
    z = X @ jax.random.normal(kt, (d,)) / jnp.sqrt(d)
    y = sign * jnp.where(sign * z >= 0, sign * z, GAMMA * sign * z)
    return m, X, y


@eqx.filter_jit
def gd(model, X, y, lr, target, max_iters):
    """Full-batch GD on ``L = ½ mean((f − y)²)`` until ``L ≤ target`` (or `max_iters`)."""
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(p, static))(X) - y) ** 2)

    def cond(c):
        p, it, value = c
        return (value > target) & (it < max_iters) & jnp.isfinite(value)

    def body(c):
        p, it, _ = c
        value, g = jax.value_and_grad(loss)(p)
        p = jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
        return p, it + 1, value

    p, it, value = jax.lax.while_loop(cond, body, (params, jnp.array(0), loss(params)))
    return eqx.combine(p, static).predictor(), it, value


def _timed(fn, repeats):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    run = statistics.median(times)
    return out, max(first - run, 0.0), run


def richardson(model, X, y, w_ib, lr, target, *, max_halvings, max_iters, passes=GD_PASSES):
    """GD+R as a researcher runs it: GD at ``lr, lr/2, lr/4, …`` to the loss `target`, each run
    extrapolated with the one before, until the extrapolation is within `AGREEMENT` of
    ibflow's limit `w_ib`, or it stops improving (less than 1.5× per halving, where O(η²)
    predicts 4×: the target, not the step, then limits GD's accuracy), or `max_halvings`.
    Returns the rows ``(η, iterations, loss, GD error, GD+R error or None, cumulative seconds)``
    (each run's time its median over `passes` passes) and how the halvings ended."""
    max_iters = jnp.asarray(max_iters)
    jax.block_until_ready(gd(model, X, y, lr, target, jnp.asarray(10)))  # compile
    previous, rows, seconds = None, [], []
    for k in range(max_halvings + 1):
        t = time.perf_counter()
        w, iters, value = jax.block_until_ready(gd(model, X, y, lr / 2**k, target, max_iters))
        seconds.append([time.perf_counter() - t])
        err_gd = float(jnp.linalg.norm(w - w_ib) / jnp.linalg.norm(w_ib))
        err_r = (None if previous is None else
                 float(jnp.linalg.norm(2 * w - previous - w_ib) / jnp.linalg.norm(w_ib)))
        stalled = err_r is not None and rows[-1][4] is not None and err_r > rows[-1][4] / 1.5
        rows.append((float(lr) / 2**k, int(iters), float(value), err_gd, err_r))
        previous = w
        if err_r is not None and (err_r <= AGREEMENT or stalled):
            break
    outcome = ("reached" if _reached(rows) else "stopped improving" if stalled
               else "halvings exhausted")
    # The same runs again (GD_PASSES in all): each run's time is its median over the passes,
    # as ibflow's is a median over its repeats (one pass varied 0.62-0.81 s between runs).
    for _ in range(passes - 1):
        for k, times in enumerate(seconds):
            t = time.perf_counter()
            jax.block_until_ready(gd(model, X, y, lr / 2**k, target, max_iters))
            times.append(time.perf_counter() - t)
    cumulative = itertools.accumulate(statistics.median(times) for times in seconds)
    return [row + (total,) for row, total in zip(rows, cumulative)], outcome


def _reached(rows):
    return rows[-1][4] is not None and rows[-1][4] <= AGREEMENT


def compare(key, *, max_halvings, max_iters, repeats, passes=GD_PASSES):
    model, X, y = problem(key)
    sol, compile_s, ibflow_s = _timed(lambda: ibflow.integrate(model, X, y, throw=False),
                                      repeats)
    report = sol.kinks
    if not bool(sol.converged) or int(report.slides) == 0:
        return None
    w_ib = sol.predictor
    # GD step: a fraction of 2/λ_max with λ_max ≈ (a² + ‖w‖²)·‖X‖²/n along the path.
    size = max(float(model.a**2 + jnp.sum(model.w**2)),
               float(sol.model.a**2 + jnp.sum(sol.model.w**2)))
    lr = jnp.asarray(0.5) / (size * float(jnp.linalg.norm(X, 2) ** 2) / N)
    scale = 0.5 * jnp.mean(y**2)
    run = functools.partial(richardson, model, X, y, w_ib, lr, max_halvings=max_halvings,
                            max_iters=max_iters, passes=passes)
    # At ibflow's default target (the "ratio (default)" column), and at each target of
    # ibflow's own ladder: GD+R gets the loss target that serves it best, as ibflow gets its
    # cheapest setting (a target tighter than the accuracy needs costs GD ~1.5x: 0.63 s at
    # 1e-24 against 0.41 s at 1e-16 on seed 4).
    default_rows, _ = run(sol.target_loss)
    gd_ladder = [(rel, *run(rel * scale)) for rel in sorted({rel for _, rel in LADDER})]
    reached = [(rel, rows) for rel, rows, _ in gd_ladder if _reached(rows)]
    gd_target, rows = min(reached or [(None, default_rows)], key=lambda r: r[1][-1][5])
    # Work–precision of ibflow itself: the same program at looser settings (the tolerances
    # and the target are traced: no new compile), each against the default's limit, which is
    # in turn checked against Theorem 4's argmin Q (the independent reference).
    ref = argmin_q(model, sol, X, y)
    ladder = []
    for rtol, rel in LADDER:
        loose, _, seconds = _timed(lambda rtol=rtol, rel=rel: ibflow.integrate(
            model, X, y, throw=False, rtol=rtol, atol=1e-4 * rtol, target_loss=rel * scale),
            repeats)
        ladder.append((rtol, rel, int(loose.steps), seconds, _distance(loose.predictor, w_ib),
                       bool(loose.converged)))
    return dict(switches=int(report.switches), slides=int(report.slides),
                sliding_time=float(report.sliding_time), compile_s=compile_s,
                ibflow_s=ibflow_s, rows=rows, gd_target=gd_target, default_rows=default_rows,
                gd_ladder=[(rel, r[-1], how) for rel, r, how in gd_ladder],
                steps=int(sol.steps), ladder=ladder,
                vs_reference=_distance(w_ib, ref.w))


def argmin_q(model, sol, X, y):
    """Theorem 4's reference: argmin Q on the affine interpolation set, for the final sign of
    ``a`` read off the flow (docs/theory §2.4 flip rule); the `minimize_regularizer` result."""
    Q = ibflow.implicit_bias(model, final_sign=jnp.sign(sol.model.a))
    return ibflow.minimize_regularizer(Q, X, y, throw=False)


def _distance(w, reference):
    return float(jnp.linalg.norm(w - reference) / jnp.linalg.norm(reference))


def at_agreement(out):
    """The cheapest ladder setting whose limit is within `AGREEMENT` of the default's (None if
    none is): ``(rtol, target, steps, seconds, distance, converged)``."""
    good = [r for r in out["ladder"] if r[5] and r[4] <= AGREEMENT]
    return min(good, key=lambda r: r[3]) if good else None


def large(key, n, d, repeats):
    """One sliding neuron at (n, d): ibflow's times, events and distance to argmin Q."""
    model, X, y = problem(key, n, d)
    sol, compile_s, run_s = _timed(lambda: ibflow.integrate(model, X, y, throw=False), repeats)
    ref = argmin_q(model, sol, X, y)
    distance = _distance(sol.predictor, ref.w)
    return dict(n=n, d=d, status=ibflow.Status[sol.status].split(" (")[0], steps=int(sol.steps),
                switches=int(sol.kinks.switches), slides=int(sol.kinks.slides),
                compile_s=compile_s, run_s=run_s, distance=distance,
                reference=ibflow.Status[ref.status].split(" (")[0])


def _comparison_table(results):
    lines = ["| seed | switches | slides | t sliding | ibflow compile s | ibflow run s (steps) | "
             "ibflow vs argmin Q | GD+R at 1e-24·L₀ s | ratio (default) | "
             "ibflow to 1e-7: setting, s | GD+R to 1e-7: target, halvings, s | "
             "GD+R vs ibflow | GD alone vs ibflow | ratio at 1e-7 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for seed, out in results:
        last, default = out["rows"][-1], out["default_rows"][-1]
        reached = _reached(out["rows"])
        err_r = "n/a" if last[4] is None else f"{last[4]:.2e}"
        bound = "" if reached else " (lower bound)"
        best = at_agreement(out)
        loose = ("none" if best is None else
                 f"rtol {best[0]:.0e}, L ≤ {best[1]:.0e}·L₀: {best[3]:.4f} ({best[2]} steps)")
        gd_setting = (f"L ≤ {out['gd_target']:.0e}·L₀" if out["gd_target"] is not None
                      else "L ≤ 1e-24·L₀ (none reached)")
        ratio = "n/a" if best is None else f"{last[5] / best[3]:.0f}×{bound}"
        default_bound = "" if _reached(out["default_rows"]) else " (lower bound)"
        lines.append(
            f"| {seed} | {out['switches']} | {out['slides']} | {out['sliding_time']:.3g} | "
            f"{out['compile_s']:.1f} | {out['ibflow_s']:.4f} ({out['steps']}) | "
            f"{out['vs_reference']:.1e} | {default[5]:.2f} | "
            f"{default[5] / out['ibflow_s']:.0f}×{default_bound} | {loose} | "
            f"{gd_setting}, {len(out['rows']) - 1}, {last[5]:.2f}"
            f"{'' if reached else ' (not reached)'} | {err_r} | {last[3]:.2e} | {ratio} |")
    lines += ["", "GD+R's halvings at its cheapest target (the ratio at 1e-7 above):", "",
              "| seed | η | iterations | final loss | GD+R vs ibflow | GD alone vs ibflow | "
              "cumulative s |", "|---|---|---|---|---|---|---|"]
    for seed, out in results:
        for lr, iters, value, err_gd, err_r, total in out["rows"]:
            lines.append(f"| {seed} | {lr:.3g} | {iters} | {value:.1e} | "
                         f"{'' if err_r is None else f'{err_r:.2e}'} | {err_gd:.2e} | "
                         f"{total:.2f} |")
    lines += ["", "GD+R at each loss target of ibflow's ladder (its last halving; 'stopped "
              "improving': the target, not the step, limits GD's accuracy there):", "",
              "| seed | target / L₀ | last η | GD+R vs ibflow | cumulative s | halvings ended |",
              "|---|---|---|---|---|---|"]
    for seed, out in results:
        for rel, (lr, _, _, _, err_r, total), how in out["gd_ladder"]:
            lines.append(f"| {seed} | {rel:.0e} | {lr:.3g} | "
                         f"{'n/a' if err_r is None else f'{err_r:.2e}'} | {total:.2f} | {how} |")
    lines += ["", "ibflow's own accuracy knob on the same problems (distance of the limit to the "
              "default's; the cheapest setting within 1e-7 gives the ratio at 1e-7):", "",
              "| seed | rtol | target / L₀ | steps | run s | distance to the default's limit | "
              "status |", "|---|---|---|---|---|---|---|"]
    for seed, out in results:
        for rtol, rel, steps, seconds, dist, converged in out["ladder"]:
            lines.append(f"| {seed} | {rtol:.0e} | {rel:.0e} | {steps} | {seconds:.4f} | "
                         f"{dist:.1e} | {'converged' if converged else 'not converged'} |")
    return "\n".join(lines)


def _large_table(big):
    return "\n".join([
        "| n | d | status | steps | switches | slides | compile s | run s | "
        "distance to argmin Q | reference status |", "|---|---|---|---|---|---|---|---|---|---|",
        f"| {big['n']} | {big['d']} | {big['status']} | {big['steps']} | {big['switches']} | "
        f"{big['slides']} | {big['compile_s']:.1f} | {big['run_s']:.2f} | "
        f"{big['distance']:.1e} | {big['reference']} |"])


def _draw(results):
    def draw(path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.8))
        for k, (seed, out) in enumerate(results):
            color = f"C{k % 10}"
            rows = out["rows"]
            ax.loglog([r[5] for r in rows], [r[3] for r in rows], "o:", color=color, ms=3,
                      label="GD (dotted)" if k == 0 else None)
            rich = [(r[5], r[4]) for r in rows if r[4] is not None]
            if rich:
                ax.loglog(*zip(*rich), "s-", color=color, ms=4,
                          label="GD + Richardson (solid)" if k == 0 else None)
            ax.axvline(out["ibflow_s"], color=color, lw=0.8)
            best = at_agreement(out)
            if best is not None:  # ibflow at the agreement level: its time and its distance
                ax.loglog([best[3]], [max(best[4], 1e-16)], "*", color=color, ms=9,
                          label=f"seed {seed}: ibflow's cheapest setting within 1e-7")
        ax.axhline(AGREEMENT, color="k", lw=0.6, ls="--")
        ax.set(xlabel="wall time (s); GD: its runs so far, at its cheapest loss target; "
                      "lines: ibflow's default",
               ylabel="relative distance to ibflow's limit",
               title="Sliding leaky neurons: GD step halving vs the exact flow")
        ax.legend(fontsize=8, loc="center left")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    return draw


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets and sizes")
    parser.add_argument("--seeds", default=",".join(map(str, range(12))),
                        help="comma-separated problem seeds (default 0,...,11: four of them "
                             "slide, 2, 4, 10 and 11)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"),
                        help="where kinks.md and kinks.png go (default benchmarks/results)")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers; got {args.seeds!r}")
    max_halvings = 6 if args.quick else 12
    max_iters = 10**6 if args.quick else 10**8
    repeats = 3 if args.quick else 30  # medians of ms-scale runs: the machine jitters ~2x
    intro = (f"Leaky neuron γ = {GAMMA}, n = {N}, d = {D}, α = {ALPHA}, s = {SHAPE}; sliding "
             f"cases only; agreement target {AGREEMENT:g}.")
    print(intro + "\n")
    results = []
    for seed in seeds:
        out = compare(jax.random.key(seed), max_halvings=max_halvings, max_iters=max_iters,
                      repeats=repeats, passes=1 if args.quick else GD_PASSES)
        if out is not None:
            results.append((seed, out))
            best = at_agreement(out)
            print(f"seed {seed}: ibflow {out['ibflow_s']:.4f} s (to 1e-7: "
                  f"{'n/a' if best is None else f'{best[3]:.4f} s'}), GD+R to 1e-7 "
                  f"{out['rows'][-1][5]:.2f} s (at 1e-24·L₀: {out['default_rows'][-1][5]:.2f} s)",
                  flush=True)
    comparison = _comparison_table(results) if results else "No sliding problem among the seeds."
    n, d = (N, D) if args.quick else (100, 1000)
    big = large(jax.random.key(0), n, d, repeats)
    body = (comparison + "\n\n## A sliding neuron at the CLI's size\n\n" + _large_table(big)
            + "\n")
    print(body)
    paths = C.write_report(args.out, "kinks", "Kinked flows: ibflow vs GD + Richardson",
                           C.machine(), intro, body, _draw(results))
    print(f"wrote {paths['md']} and {paths['png']}")


if __name__ == "__main__":
    main()
