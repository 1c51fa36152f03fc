"""``python -m benchmarks.gpu_sweeps PART [--small] [--out DIR]``: the accelerator rows of issues
34, 35 and 38 (large sweeps on one GPU), one part per process; ``report DIR`` writes the table.

Parts (each writes ``DIR/PART.json`` and prints one line per step as it goes):

- ``references``: the Figure 7.1 grid of 10⁴ members (d = 1000, n = 100, seed-1993 data; 100
  shapes in [0, 0.99] × 100 scales in [1e-5, 10^-0.6]) by ``ibflow.sweep`` with default options,
  once with the default ``references`` (distances to the min-ℓ1 and min-ℓ2 interpolants) and
  once with ``references=()``: first call and the median of three warm calls each (issue 38:
  within 1.2× of each other).
- ``million``: the same problem on 1 000 shapes × 1 000 scales, default options: first call and
  a warm call, the status counts; a 32 × 32 sub-grid (every 32nd shape and scale, 1 024
  members) integrated again on the host's CPU in the same process, and 128 of them against
  the numpy damped Newton on the dual (`reference.benchmark_dual_newton`, an independent
  argmin Q) (issue 38: ≤ 15 s warm, every member converged, within 1e-10).
- ``leaky``: 10⁴ leaky-neuron initializations (d = 30, n = 8, slope 0.3: `benchmarks.kinks`'s
  problem): 100 seeds × 100 scales in [0.1, 3], shape 0, the sign of ``a`` the teacher's; first
  call and the median of two warm calls; statuses and sliding members; 64 members against
  ``ibflow.integrate`` on the host CPU (issue 34: ≤ 5 s warm).
- ``students``: 1 024 two-layer ReLU students, each on its own teacher–student data
  (`benchmarks.students`'s recipe): the first call (issue 34 and 35: ≤ 60 s), and a warm call
  if the first took under a minute.

A part bounded by the device time is run under ``timeout``; what it reports before is kept
(the JSON is rewritten after every step). ``--small`` shrinks every part (the CPU smoke test).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

from . import _common as C
from . import gpu, kinks, reference, students
from .ibflow_grid import _ShapeScaleDiagonal

PARTS = ("references", "million", "leaky", "students")


class _Log:
    """One part's record: printed line by line and rewritten to ``DIR/PART.json`` each step."""

    def __init__(self, part: str, out: Path, small: bool, label: str | None = None):
        self.path = out / f"{part}{'-' + label if label else ''}.json"
        out.mkdir(parents=True, exist_ok=True)
        dev = jax.devices()[0]
        self.info = dict(part=part, small=small, device=str(getattr(dev, "device_kind", dev)),
                         platform=dev.platform, jax=jax.__version__,
                         date=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
        self.set()

    def set(self, **kv) -> None:
        self.info.update(kv)
        if kv:
            print(f"[{self.info['part']} {time.strftime('%H:%M:%S')}] "
                  + ", ".join(f"{k}={_short(v)}" for k, v in kv.items()), flush=True)
        self.path.write_text(json.dumps(self.info, indent=1, default=_plain))


def _short(v):
    return f"{v:.4g}" if isinstance(v, float) else v


def _plain(v):
    return v.item() if hasattr(v, "item") else str(v)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _counts(res) -> dict[str, int]:
    names = res.status_names
    values, counts = np.unique(np.asarray(res["status"]).ravel(), return_counts=True)
    return {names[int(v)]: int(c) for v, c in zip(values, counts)}


def _grid_sweep(X, y, shapes, scales, **kw):
    return ibflow.sweep(_ShapeScaleDiagonal(X.shape[1]), ibflow.Grid(shape=shapes, scale=scales),
                        (jnp.asarray(X), jnp.asarray(y)), progress=False, **kw)


def part_references(log: _Log, small: bool, members: int | None) -> None:
    X, y, shapes, scales = gpu.problem(small)
    for label, kw in (("with", {}), ("without", {"references": ()})):
        once = functools.partial(_grid_sweep, X, y, shapes, scales, **kw)
        res, first = _timed(once)
        warm = sorted(_timed(once)[1] for _ in range(3))[1]
        log.set(**{f"{label}_first_s": first, f"{label}_warm_s": warm,
                   f"{label}_statuses": _counts(res)})
    log.set(members=len(shapes) * len(scales),
            ratio=log.info["with_warm_s"] / log.info["without_warm_s"])


def part_million(log: _Log, small: bool, members: int | None) -> None:
    X, y, _, _ = gpu.problem(small)
    count, stride = (32, 8) if small else (1000, 32)
    shapes, scales = gpu.axes(count, count)
    res, first = _timed(lambda: _grid_sweep(X, y, shapes, scales))
    log.set(members=count * count, first_s=first, statuses=_counts(res),
            steps_mean=float(np.mean(res["steps"])), steps_max=int(np.max(res["steps"])))
    w = np.asarray(res["predictor"])[::stride, ::stride].reshape(-1, X.shape[1])
    del res
    res, warm = _timed(lambda: _grid_sweep(X, y, shapes, scales))
    log.set(warm_s=warm, warm_statuses=_counts(res))
    del res
    cpu = _grid_sweep(X, y, shapes[::stride], scales[::stride], devices=jax.devices("cpu"))
    w_cpu = np.asarray(cpu["predictor"]).reshape(-1, X.shape[1])
    log.set(sample=len(w), vs_host_cpu_max=float(np.max(C.rel_dist(w, w_cpu))))
    s, a = np.meshgrid(shapes[::stride], scales[::stride], indexing="ij")
    pick = np.random.default_rng(0).choice(len(w), size=min(128, len(w)), replace=False)
    w_ref = np.stack([reference.benchmark_dual_newton(X, y, C.k_of(a.ravel()[i], s.ravel()[i]))
                      for i in pick])
    log.set(argmin_sample=len(pick), vs_dual_newton_max=float(np.max(C.rel_dist(w[pick], w_ref))))


class _LeakyInit(eqx.Module):
    """A leaky neuron from seed and scale (shape 0), its output sign fixed to the teacher's."""

    dim: int = eqx.field(static=True)
    sign: float = eqx.field(static=True)

    def __call__(self, seed, scale):
        m = ibflow.LeakyReLUNeuron.from_scale_shape(scale, 0.0, dim=self.dim, slope=kinks.GAMMA,
                                                    key=jax.random.key(seed))
        return eqx.tree_at(lambda m: m.a, m, self.sign * jnp.abs(m.a))


def part_leaky(log: _Log, small: bool, members: int | None) -> None:
    teacher, X, y = kinks.problem(jax.random.key(0))
    build = _LeakyInit(X.shape[1], float(jnp.sign(teacher.a)))
    count = math.isqrt(members) if members else (8 if small else 100)
    grid = ibflow.Grid(seed=np.arange(count), scale=np.logspace(-1, np.log10(3), count))

    def once(**kw):
        return ibflow.sweep(build, grid, (X, y), progress=False, **kw)

    log.set(members=grid.size)
    res, first = _timed(once)
    warm = sorted(_timed(once)[1] for _ in range(2))[0 if small else 1]
    log.set(first_s=first, warm_s=warm, statuses=_counts(res),
            sliding=int(np.sum(np.asarray(res["slides"]) > 0)),
            steps_max=int(np.max(res["steps"])))
    axes = grid.members()
    pick = np.random.default_rng(0).choice(grid.size, size=min(64, grid.size), replace=False)
    w_dev = np.asarray(res["predictor"]).reshape(grid.size, -1)[pick]
    cpu = jax.devices("cpu")[0]
    w_cpu = []
    with jax.default_device(cpu):
        Xc, yc = jax.device_put((X, y), cpu)
        for i in pick:
            m = build(axes["seed"][i], axes["scale"][i])
            w_cpu.append(np.asarray(ibflow.integrate(m, Xc, yc, throw=False).model.predictor()))
    log.set(sample=len(pick), vs_host_cpu_max=float(np.max(C.rel_dist(w_dev, np.stack(w_cpu)))))


def part_students(log: _Log, small: bool, members: int | None) -> None:
    members = members or (8 if small else 1024)
    data = [students.student_data(k) for k in range(members)]
    grid = ibflow.Grid(data_index=np.arange(members))
    log.set(members=members)

    def once():
        return ibflow.sweep(students.Student(), grid, data, progress=False)

    res, first = _timed(once)
    log.set(first_s=first, statuses=_counts(res), chunk=res.metadata["config"]["chunk_size"],
            steps_median=float(np.median(res["steps"])), steps_max=int(np.max(res["steps"])),
            lockstep_efficiency=float(res.metadata["lockstep_efficiency"]))
    if first < 60:
        log.set(warm_s=_timed(once)[1])


def _check(name: str, p: dict) -> str:
    """The report's check column for part `name`'s record `p` (unfinished parts say so)."""
    done = {"references": "ratio", "million": "vs_dual_newton_max", "leaky": "vs_host_cpu_max",
            "students": "steps_max"}[name]
    if done not in p:
        limit = p.get("limit_s")
        return "**unfinished**" + (f" within the {limit:.0f} s given" if limit else "")
    if name == "references":
        return f"warm ratio with/without references {p['ratio']:.2f}"
    if name == "million":
        return (f"{p['sample']} members vs host CPU: max {p['vs_host_cpu_max']:.1e}; "
                f"{p['argmin_sample']} vs numpy dual Newton: max {p['vs_dual_newton_max']:.1e}")
    if name == "leaky":
        return (f"{p['sliding']} sliding, steps max {p['steps_max']}; {p['sample']} vs host CPU: "
                f"max {p['vs_host_cpu_max']:.1e}")
    return (f"steps median {p['steps_median']:.0f} / max {p['steps_max']}; chunk {p['chunk']}; "
            f"lockstep efficiency {p['lockstep_efficiency']:.2f}")


def report(out: Path) -> str:
    """The markdown table of the part records found under `out` (written to
    ``out/gpu_sweeps.md``, with the figure ``gpu_sweeps.png``); a part's record is
    ``PART.json``, or ``PART-LABEL.json`` for a variant (e.g. a smaller size)."""
    records = sorted(out.glob("*.json"))
    parts = [(f.stem, json.loads(f.read_text())) for f in records
             if f.stem.split("-")[0] in PARTS]
    if not parts:
        raise SystemExit(f"report: no part records under {out}")
    first_record = parts[0][1]
    lines = [f"**Device:** {first_record['device']} ({first_record['platform']}), jax "
             f"{first_record['jax']}, {first_record['date']} UTC. "
             "`python -m benchmarks.gpu_sweeps PART`, one process per part.", "",
             "| part | members | first call [s] | warm call [s] | statuses | check |",
             "|---|---|---|---|---|---|"]

    def fmt(x, spec):
        return "—" if x is None else format(x, spec)

    for stem, p in parts:
        first = p.get("first_s", p.get("with_first_s"))
        warm = p.get("warm_s", p.get("with_warm_s"))
        statuses = p.get("statuses", p.get("with_statuses"))
        lines.append(f"| {stem} | {p.get('members', '—')} | {fmt(first, '.2f')} | "
                     f"{fmt(warm, '.3f')} | {statuses or '—'} | {_check(p['part'], p)} |")
    body = "\n".join(lines) + "\n"
    notes = out / "notes.md"  # what the numbers mean, written by whoever ran the parts
    (out / "gpu_sweeps.md").write_text("# Large sweeps on one GPU\n\n" + body + (
        "\n" + notes.read_text() if notes.is_file() else ""))
    _draw(parts, out / "gpu_sweeps.png")
    return body


#: The issues' targets per part (seconds): the warm call, or the first call for the students.
TARGETS = {"million": 15.0, "leaky": 5.0, "students": 60.0}


def _draw(parts: list[tuple[str, dict]], path: Path) -> None:
    """Each part's time (warm; the students' first call) against its issue's target; an
    unfinished part is drawn hatched at the time it was given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 1.6 + 0.45 * len(parts)))
    for i, (stem, p) in enumerate(parts):  # targets: for the issue's sizes, not variants
        key = "first_s" if p["part"] == "students" else ("with_warm_s" if p["part"] ==
                                                          "references" else "warm_s")
        done = key in p
        value = p[key] if done else p.get("limit_s") or 0.0
        ax.barh(i, value, color="C0" if done else "none", edgecolor="C0",
                hatch=None if done else "//")
        if p["part"] in TARGETS and stem == p["part"]:
            ax.plot([TARGETS[p["part"]]] * 2, [i - 0.4, i + 0.4], "r-", lw=2)
    ax.set_yticks(range(len(parts)), [f"{stem} ({p.get('members', '?')})" for stem, p in parts])
    ax.set_xscale("log")
    ax.set_xlabel("seconds (warm call; students: first call)\nred: the issue's target; "
                  "hatched: unfinished when stopped")
    ax.set_title(f"Large sweeps on one {parts[0][1]['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sweeps",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=(*PARTS, "report"))
    ap.add_argument("--small", action="store_true", help="small sizes (the CPU smoke test)")
    ap.add_argument("--members", type=int, default=None,
                    help="leaky: about this many (a square), students: this many")
    ap.add_argument("--label", default=None,
                    help="a variant's name: the record is written to PART-LABEL.json")
    ap.add_argument("--limit-s", type=float, default=None,
                    help="the time the caller's `timeout` gives this part (recorded only)")
    ap.add_argument("--out", default="benchmarks/results/gpu_sweeps",
                    help="directory of the parts' JSON (default benchmarks/results/gpu_sweeps)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.part == "report":
        print(report(out))
        return 0
    if args.members is not None and (args.members < 1 or args.part not in ("leaky", "students")):
        ap.error("--members takes a positive count, for the parts leaky and students")
    log = _Log(args.part, out, args.small, args.label)
    log.set(limit_s=args.limit_s, started=time.strftime("%H:%M:%S"))
    globals()[f"part_{args.part}"](log, args.small, args.members)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
