"""Issue 35, item 3: a sweep of two-layer ReLU students, each on its own teacher–student data:
how many members end in a final status (converged or stationary), and how fast.

``python -m benchmarks.students [--quick] [--members M] [--chunk-size C] [--out DIR]``

Student k (k = 0 … M−1, default M = 256; ``--quick``: 16): ``TwoLayerNet.from_scale_shape(α,
0.5, dim=5, width=10, activation=ReLU(), key=jax.random.key(k))`` with α = 0.1 for even k and 1
for odd k, on 10 Gaussian inputs labelled by 3 ReLU teachers with output weights +1, −1, +1,
inputs then teachers drawn by ``numpy.random.default_rng(900 + k)`` (the issue's recipe; about
a third of these students stop above their target, at a spurious minimum or on a kink). One
``ibflow.sweep`` over ``Grid(data_index=arange(M))`` with the list of the M data sets: each
member runs on its own data set.

Timed: the first call (compile and run) and a second, warm call of the same sweep (its program
is reused: `build` is an Equinox module, compared by value). Printed and written to
``DIR/students.md`` (default ``benchmarks/results``) with the figure ``DIR/students.png``:
every member's steps and final loss, coloured by status.
"""

from __future__ import annotations

import argparse
import collections
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

from . import _common as C

N, D, WIDTH, TEACHERS = 10, 5, 10, 3


def student_data(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Student k's data: 10 Gaussian inputs, then 3 ReLU teachers (output weights +1, −1, +1),
    drawn by ``default_rng(900 + k)``."""
    rng = np.random.default_rng(900 + k)
    X = rng.standard_normal((N, D))
    teachers = rng.standard_normal((TEACHERS, D))
    return X, np.maximum(X @ teachers.T, 0) @ np.array([1.0, -1.0, 1.0])


class Student(eqx.Module):
    """Student ``data_index``: α = 0.1 (even) or 1 (odd), shape 0.5, its own key."""

    def __call__(self, data_index):
        scale = jnp.where(data_index % 2 == 0, 0.1, 1.0)
        return ibflow.TwoLayerNet.from_scale_shape(scale, 0.5, dim=D, width=WIDTH,
                                                   activation=ibflow.ReLU(),
                                                   key=jax.random.key(data_index))


def run(members: int, chunk_size: int | None) -> dict:
    data = [student_data(k) for k in range(members)]
    grid = ibflow.Grid(data_index=np.arange(members))

    def once():
        start = time.perf_counter()
        res = ibflow.sweep(Student(), grid, data, chunk_size=chunk_size, progress=False)
        return res, time.perf_counter() - start

    res, first = once()
    res, warm = once()
    return {"result": res, "first": first, "warm": warm}


def table(members: int, out: dict) -> str:
    res = out["result"]
    names = res.status_names
    counts = collections.Counter(names[int(s)] for s in res["status"])
    final = counts.get("converged", 0) + counts.get("stationary", 0)
    others = ", ".join(f"{k}: {v}" for k, v in counts.items()
                       if k not in ("converged", "stationary"))
    steps = res["steps"]
    rows = [
        "| students | chunk | chunks at once | first call s | warm call s | converged "
        "| stationary | other | steps (median / max) | lockstep efficiency |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {members} | {res.metadata['config']['chunk_size']} | "
        f"{res.metadata['chunks_at_once']} | {out['first']:.1f} | "
        f"{out['warm']:.1f} | {counts.get('converged', 0)} | {counts.get('stationary', 0)} | "
        f"{members - final}" + (f" ({others})" if others else "")
        + f" | {int(np.median(steps))} / {int(steps.max())} | "
        f"{res.metadata['lockstep_efficiency']:.2f} |",
    ]
    return "\n".join(rows) + "\n"


def draw(out: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = out["result"]
    names = res.status_names
    fig, ax = plt.subplots(figsize=(7, 4.5))
    status = np.array([names[int(s)] for s in res["status"]])
    for name in sorted(set(status)):
        pick = status == name
        ax.scatter(res["steps"][pick], res["loss"][pick], s=12, label=f"{name} ({pick.sum()})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps of the member's solve")
    ax.set_ylabel("final loss")
    ax.set_title(f"{len(status)} ReLU students, one sweep: warm {out['warm']:.1f} s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 students")
    ap.add_argument("--members", type=int, default=None, help="students (default 256)")
    ap.add_argument("--chunk-size", type=int, default=None,
                    help="members per compiled batch (default: the sweep's)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    members = args.members or (16 if args.quick else 256)
    machine = C.machine()
    out = run(members, args.chunk_size)
    body = table(members, out)
    print(body)
    intro = ("`python -m benchmarks.students" + (" --quick" if args.quick else "")
             + (f" --members {args.members}" if args.members else "")
             + (f" --chunk-size {args.chunk_size}" if args.chunk_size else "")
             + "`: one `ibflow.sweep` of two-layer ReLU students, each on its own data set "
             "(module docstring). First call: compile and run; warm: the same sweep again.")
    paths = C.write_report(args.out, "students", "ReLU students: one sweep, each on its own "
                           "data", machine, intro, body, lambda p: draw(out, p))
    print(f"wrote {paths['md']} and {paths['png']}")


if __name__ == "__main__":
    main()
