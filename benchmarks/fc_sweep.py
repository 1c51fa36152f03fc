"""``python -m benchmarks.fc_sweep [--small] [--out DIR]``: a sweep of fully connected networks
(issue 12, item 5).

A 5-shape × 20-scale grid of `FullyConnectedNet` width 10 (10 010 parameters) on the Figure 7.1
data (theory §2.8: seed 1993, d = 1000, n = 100), integrated by ``ibflow.sweep`` with its default
options to the exact limit (target 1e-24·mean(y²)/2, the Woodbury Kvaerno5 tail, docs/theory §8.1),
with per-member statuses. One fixed key draws the neurons' directions and signs, so members differ
in scale α and shape s only. Prints a markdown table (per shape: members, converged, steps, the
largest final loss relative to the target) and writes ``DIR/fc_sweep.{md,png}``; the figure
shows steps and final loss per member against α. ``--small``: d = 100, n = 20, 2 × 3 members.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import equinox as eqx
import jax
import numpy as np

import ibflow
from ibflow._integrate import DEFAULT_RELATIVE_TARGET
from ibflow._status import STATUS_NAMES, status_code

from . import _common as C

CONVERGED = status_code("converged")


@dataclasses.dataclass(frozen=True)
class Size:
    n: int
    d: int
    width: int
    shapes: tuple[float, ...]
    scales: tuple[float, ...]

    @classmethod
    def of(cls, small: bool) -> "Size":
        if small:
            return cls(20, 100, 10, (0.0, 0.9), tuple(np.logspace(-3, 0, 3)))
        return cls(100, 1000, 10, (-0.9, -0.5, 0.0, 0.5, 0.9), tuple(np.logspace(-4, 0, 20)))


class FullyConnectedMember(eqx.Module):
    """Sweep ``build``: one member from its shape and scale (a module, compared by value, so a
    repeated sweep reuses its compilation)."""

    dim: int = eqx.field(static=True)
    width: int = eqx.field(static=True)

    def __call__(self, shape, scale):
        return ibflow.FullyConnectedNet.from_scale_shape(scale, shape, dim=self.dim,
                                                         width=self.width, key=jax.random.key(7))


def run(small: bool, *, log=None) -> dict:
    """The sweep twice (first call: compile + run; second: warm). Returns the sizes, the
    per-member arrays (shape × scale), the default target and both wall times."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    size = Size.of(small)
    data = ibflow.data.sparse_regression(jax.random.key(C.SEED), n=size.n, d=size.d)
    grid = ibflow.Grid(shape=np.asarray(size.shapes), scale=np.asarray(size.scales))
    build = FullyConnectedMember(size.d, size.width)
    walls = []
    for label in ("first call", "warm call"):
        log(f"[fc_sweep] {grid.size} members, d = {size.d}, n = {size.n}, width "
            f"{size.width}: {label} ...")
        t = time.perf_counter()
        res = ibflow.sweep(build, grid, (data.X, data.y), references=(), progress=False)
        jax.block_until_ready(res["loss"])
        walls.append(time.perf_counter() - t)
        log(f"[fc_sweep]   {walls[-1]:.1f} s")
    shape = (len(size.shapes), len(size.scales))
    out = {k: np.asarray(res[k]).reshape(shape) for k in ("status", "steps", "loss")}
    # ibflow's default target (the sweep passes no target_loss): 1e-24 · mean(y²)/2.
    out["target"] = DEFAULT_RELATIVE_TARGET * 0.5 * float(np.mean(np.asarray(data.y) ** 2))
    return dict(size=size, first_s=walls[0],
                warm_s=walls[1], lockstep=res.metadata.get("lockstep_efficiency"), **out)


def table(r: dict) -> str:
    s = r["size"]
    lines = [f"{len(s.shapes) * len(s.scales)} members, FullyConnectedNet width "
             f"{s.width} ({s.width * (s.d + 1)} parameters), d = {s.d}, n = {s.n}, α ∈ "
             f"[{min(s.scales):g}, {max(s.scales):g}]: first call {r['first_s']:.1f} s "
             f"(compile included), warm {r['warm_s']:.1f} s, lockstep efficiency "
             f"{r['lockstep']:.2f}.", "",
             "| shape s | members | converged | median steps | max steps "
             "| max final loss / target |",
             "|---|---|---|---|---|---|"]
    for i, shp in enumerate(s.shapes):
        st, steps, loss = r["status"][i], r["steps"][i], r["loss"][i]
        lines.append(f"| {shp:g} | {st.size} | {int((st == CONVERGED).sum())} | "
                     f"{np.median(steps):.0f} | {steps.max()} | "
                     f"{loss.max() / r['target']:.2g} |")
    statuses = {STATUS_NAMES[int(k)]: int(v)
                for k, v in zip(*np.unique(r["status"], return_counts=True))}
    lines += ["", "Statuses: " + ", ".join(f"{k} {v}" for k, v in statuses.items()) + "."]
    return "\n".join(lines) + "\n"


def figure(r: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = r["size"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, shp in enumerate(s.shapes):
        bad = r["status"][i] != CONVERGED
        line, = ax1.plot(s.scales, r["steps"][i], "o-", ms=3, label=f"s = {shp:g}")
        ax2.plot(s.scales, r["loss"][i] / r["target"], "o-", ms=3, color=line.get_color())
        ax1.plot(np.asarray(s.scales)[bad], r["steps"][i][bad], "x", ms=9, color="k")
    ax1.set(xscale="log", yscale="log", xlabel="scale α", ylabel="solver steps",
            title="steps per member (x: not converged)")
    ax2.axhline(1.0, color="k", lw=0.8, ls="--")
    ax2.set(xscale="log", yscale="log", xlabel="scale α", ylabel="final loss / target",
            title="final loss (≤ 1: converged)")
    ax1.legend(fontsize=8)
    fig.suptitle(f"ibflow.sweep, FullyConnectedNet width {s.width}, d = {s.d}, n = {s.n}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(r: dict, machine: dict, out_dir: str, small: bool) -> dict[str, str]:
    title = ("Sweep of fully connected networks (issue 12, item 5)"
             + (" — SMALL sizes" if small else ""))
    return C.write_report(out_dir, "fc_sweep", title, machine,
                          "`ibflow.sweep` with default options (target 1e-24·mean(y²)/2).",
                          table(r), lambda path: figure(r, path))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fc_sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    machine = C.machine()
    r = run(args.small)
    paths = write(r, machine, args.out, args.small)
    print(table(r))
    print("written: " + ", ".join(paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
