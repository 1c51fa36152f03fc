"""Vmapped explicit steps: Diffrax's stage ``tensordot`` against ibflow's unrolled stage sum
(`ibflow._solver_step.stage_sum`), side by side in one run.

    python -m benchmarks.vmapped_steps [--small] [--out DIR]

The case is ``ibflow reproduce mirror-abs`` at one width: ``ShallowNet`` (|·|) on three points,
width-scaled mirror flow with the three polynomial potentials × two seeds = 6 members in one
``vmap`` of ``ibflow.integrate`` (explicit Tsit5 to the reproduction's target, state 3·width + 1,
integrated as smooth, as the reproduction does from width 64 on).
Each width is run twice in this process, Diffrax's own stage products and then ibflow's sum
(the in-memory caches cleared in between, so each compiles): the first call (trace, compile and
run) and the median of warm calls. A single member alone gives the per-step cost without a
batch. The members' steps must agree between the two (the same solver; round-off may move
a step or two), and their outputs on the evaluation grid to `AGREE` (the flows' rtol is 1e-8).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow
from ibflow import _solver_step
from ibflow._reproduce import mirror as M

from . import _common as C

#: The largest difference between the two variants' outputs that passes: each flow is exact to
#: its rtol (1e-8) and their steps differ by round-off (measured up to 1.5e-8 at width 2048).
AGREE = 1e-7


def _run(width: int, seeds: int):
    """The reproduction's members at one width (`M.nets`, `M.member_solve`, integrated as
    smooth) as one jitted vmapped solve returning (outputs, steps, converged), and one member
    alone."""
    nets = M.nets(width, "abs", jax.random.split(jax.random.key(width), seeds))
    coeffs = jnp.array(list(M.POTENTIALS.values()))
    solve = M.member_solve(width, scaled=True, data=(M.ABS_X, M.ABS_Y),
                           formulation=ibflow.ParameterSpace(kinks=False))

    def one(c, net):
        outputs, converged = M.on_grid(sol := solve(c, net))
        return outputs, sol.steps, converged

    batch = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))
    single = jax.jit(one)
    first = jax.tree_util.tree_map(lambda a: a[0] if eqx.is_array(a) else a, nets)
    return (lambda: batch(coeffs, nets)), (lambda: single(coeffs[0], first))


def _measure(width: int, seeds: int, runs: int) -> dict:
    jax.clear_caches()
    batch, single = _run(width, seeds)
    t0 = time.perf_counter()
    out, steps, converged = jax.block_until_ready(batch())
    first = time.perf_counter() - t0
    warm = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(batch())
        warm.append(time.perf_counter() - t0)
    jax.block_until_ready(single())
    alone = []
    for _ in range(runs):
        t0 = time.perf_counter()
        _, one_steps, _ = jax.block_until_ready(single())
        alone.append(time.perf_counter() - t0)
    steps = np.asarray(steps)
    return dict(first_s=first, warm_s=float(np.median(warm)), steps=steps.tolist(),
                max_steps=int(steps.max()), outputs=np.asarray(out),
                converged=bool(np.all(np.asarray(converged))),
                us_per_step=1e6 * float(np.median(warm)) / int(steps.max()),
                single_us_per_step=1e6 * float(np.median(alone)) / int(one_steps))


def run(small: bool, out_dir: str, log=print) -> dict:
    widths, seeds, runs = ([16], 2, 1) if small else ([256, 1024, 2048], 2, 2)
    original = _solver_step._stage_sums
    rows = []
    for width in widths:
        res = {}
        for label, scope in (("Diffrax tensordot", contextlib.nullcontext), ("ibflow stage sum",
                                                                            original)):
            _solver_step._stage_sums = scope
            try:
                res[label] = _measure(width, seeds, runs)
            finally:
                _solver_step._stage_sums = original
            r = res[label]
            log(f"width {width}, {label}: first {r['first_s']:.2f} s, warm {r['warm_s']:.3f} s, "
                f"{r['us_per_step']:.0f} µs/step ({r['max_steps']} steps)")
        a, b = res["Diffrax tensordot"], res["ibflow stage sum"]
        rows.append(dict(width=width, members=int(np.size(a["steps"])), state=3 * width + 1,
                         steps_tensordot=a["max_steps"], steps_sum=b["max_steps"],
                         first_tensordot_s=a["first_s"], first_sum_s=b["first_s"],
                         warm_tensordot_s=a["warm_s"], warm_sum_s=b["warm_s"],
                         us_step_tensordot=a["us_per_step"], us_step_sum=b["us_per_step"],
                         single_us_step=b["single_us_per_step"],
                         speedup=a["warm_s"] / b["warm_s"],
                         converged=a["converged"] and b["converged"],
                         max_output_difference=float(np.max(np.abs(a["outputs"]
                                                                   - b["outputs"])))))
    machine = C.machine()
    body = _table(rows)
    intro = __doc__.split("\n\n", 2)[2].strip()
    paths = C.write_report(out_dir, "vmapped_steps", "Vmapped explicit steps: stage sums",
                           machine, intro, body, lambda path: _plot(rows, path))
    with open(os.path.join(out_dir, "vmapped_steps.json"), "w") as f:
        json.dump({"machine": machine, "rows": rows}, f, indent=1)
    log(body)
    return dict(rows=rows, paths=paths)


def _table(rows) -> str:
    lines = ["| width | members | state | steps (max) tensordot / sum | first call tensordot / "
             "sum [s] | warm tensordot / sum [s] | µs per batch step tensordot / sum | µs per "
             "step, one member alone | warm speed-up | max output difference |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['width']} | {r['members']} | {r['state']} | {r['steps_tensordot']} / "
            f"{r['steps_sum']} | {r['first_tensordot_s']:.2f} / {r['first_sum_s']:.2f} | "
            f"{r['warm_tensordot_s']:.3f} / {r['warm_sum_s']:.3f} | "
            f"{r['us_step_tensordot']:.0f} / {r['us_step_sum']:.0f} | "
            f"{r['single_us_step']:.0f} | {r['speedup']:.2f}× | "
            f"{r['max_output_difference']:.1e} |")
    return "\n".join(lines) + "\n"


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = [r["width"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(widths, [r["us_step_tensordot"] for r in rows], "o-", label="Diffrax tensordot")
    ax.loglog(widths, [r["us_step_sum"] for r in rows], "s-", label="ibflow stage sum")
    ax.loglog(widths, [r["members"] * r["single_us_step"] for r in rows], "k:",
              label="members × one member alone")
    ax.set_xlabel("width (state 3·width + 1)")
    ax.set_ylabel("µs per step of the vmapped batch")
    ax.set_title(f"{rows[0]['members']} vmapped mirror flows")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="width 16, one warm run")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    out = run(args.small, args.out)
    bad = [r for r in out["rows"]
           if not (r["converged"] and r["max_output_difference"] <= AGREE)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
