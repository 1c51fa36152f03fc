"""``python -m benchmarks.compile_ops [--models KEY,KEY...] [--top K] [--out DIR]``: where the
compile time of ``ibflow.integrate`` goes, as the size of the program XLA compiles.

XLA's compile time grows with the number of operations in the program after its call inliner:
every call of a jitted function (``eqx.filter_jit`` inside a trace) is a ``call`` in the lowered
module, traced once, but XLA inlines each call site, so a function called from k sites is
compiled k times. This benchmark lowers the solve of each case of `benchmarks.compile.CASES`
(the same models, flows and data; lowering only, nothing is compiled or run) to StableHLO and
counts, per function of the module, its own operations and its *inlined* size (its operations
plus the inlined sizes of the functions it calls, times their call counts), and how many times
the program inlines it (its *sites*). A function's share is sites × inlined size over the
program's inlined size: the part of XLA's work that one more or one fewer site changes. Shares
of nested functions overlap (an event function's share holds the multiplier solve it calls).

Columns: the case, the operations as written (every function once) and inlined, the share of
the multiplier solve (``ibflow._kinks.kinked._traced_once``: the equivalent-control system of
a kinked flow, at every site that evaluates the field, the event or a transition) and the
largest functions by share. Writes ``DIR/compile_ops.md``, ``DIR/compile_ops.json`` and
``DIR/compile_ops.png`` (per case, the inlined size split into the multiplier solve and the
rest). Default ``DIR``: ``benchmarks/results``. Measured wall times per case are
`benchmarks.compile`'s; this says what they are made of.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import sys
import time

from . import _common as C
from .compile import CASES

#: The function whose sites are the kink machinery's multiplier solve (its traces carry this
#: name with a numeric suffix per variant: the field's, and the tail Jacobian's projection).
MULTIPLIER_SOLVE = "_traced_once"
_FUNC = re.compile(r"^\s*func\.func (?:public |private )?@([\w$.]+)")
_CALL = re.compile(r"call @([\w$.]+)")
#: An operation: a result bound to a StableHLO/CHLO op, or one without results (not a region's
#: terminator, ``stablehlo.return``, which compiles to nothing of its own).
_OP = re.compile(r"= \"?(?:stablehlo|chlo)\.|^\s*\"?(?:stablehlo|chlo)\.(?!return\b)")


@dataclasses.dataclass
class Function:
    ops: int = 0
    calls: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def parse(module: str) -> dict[str, Function]:
    """The functions of a StableHLO module's text: their own operations and their calls."""
    funcs: dict[str, Function] = {}
    current = None
    for line in module.splitlines():
        m = _FUNC.match(line)
        if m:
            current = funcs.setdefault(m.group(1), Function())
            continue
        if current is None:
            continue
        if _OP.search(line):
            current.ops += 1
        for callee in _CALL.findall(line):
            current.calls[callee] += 1
    return funcs


def sizes(funcs: dict[str, Function], entry: str = "main") -> dict:
    """``inlined[f]`` (f's operations with every call inlined) and ``sites[f]`` (how many
    copies of f the entry function holds once everything is inlined)."""
    inlined: dict[str, int] = {}

    def size(name: str) -> int:
        if name not in inlined:
            f = funcs.get(name)
            inlined[name] = 0 if f is None else f.ops + sum(
                n * size(callee) for callee, n in f.calls.items())
        return inlined[name]

    called_by: dict = collections.defaultdict(dict)  # called_by[f][g]: calls of f in g
    for name, f in funcs.items():
        for callee, n in f.calls.items():
            called_by[callee][name] = n
    copies: dict[str, int] = {entry: 1}

    def count(name: str) -> int:  # copies of `name` once everything is inlined
        if name not in copies:
            copies[name] = sum(n * count(g) for g, n in called_by[name].items())
        return copies[name]

    sites = {k: count(k) for k in {*funcs, *called_by} if k != entry and count(k) > 0}
    total = size(entry)
    # Per function, the functions that call it, by their copies' calls (``callers[g][f]``:
    # copies of g that the copies of f hold).
    callers = {k: {g: n * count(g) for g, n in called_by[k].items() if count(g) > 0}
               for k in sites}
    return dict(total=total, written=sum(f.ops for f in funcs.values()),
                inlined={k: size(k) for k in sites}, sites=sites, callers=callers)


def _base(name: str) -> str:
    """A function's name without the numeric suffix of its trace (``_step_76`` → ``_step``)."""
    return re.sub(r"_\d+$", "", name)


def lowered_solve(key: str) -> str:
    """The StableHLO text of the compiled solve of case `key` (lowered, never compiled)."""
    import ibflow
    from ibflow import _engine, _programs

    class _Lowered(Exception):
        pass

    compiled = _engine._compiled

    def capture(arrays, skeleton):
        raise _Lowered(compiled.lower(arrays, skeleton).as_text())

    model, X, y, kwargs = CASES[key].build()
    # Off the program cache (`ibflow._programs`): a program kept by an earlier process would
    # be read back instead of reaching the engine's jit.
    directory, _programs.directory = _programs.directory, lambda: None
    _engine._compiled = capture
    try:
        ibflow.integrate(model, X, y, throw=False, **kwargs)
    except _Lowered as lowered:
        return lowered.args[0]
    finally:
        _engine._compiled = compiled
        _programs.directory = directory
    raise RuntimeError(f"case {key!r}: integrate did not reach the compiled solve")


def measure(key: str, top: int) -> dict:
    """One case's row: sizes, the multiplier solve's sites (by calling function) and share, and
    the `top` functions by share."""
    t0 = time.perf_counter()
    s = sizes(parse(lowered_solve(key)))
    total = s["total"]
    shares = sorted(((s["sites"][f] * s["inlined"][f], f) for f in s["sites"]), reverse=True)
    solve = sum(s["sites"][f] * s["inlined"][f] for f in s["sites"]
                if _base(f) == MULTIPLIER_SOLVE)
    solve_sites = sum(s["sites"][f] for f in s["sites"] if _base(f) == MULTIPLIER_SOLVE)
    where: collections.Counter = collections.Counter()
    for f in s["sites"]:
        if _base(f) == MULTIPLIER_SOLVE:
            for caller, n in s["callers"][f].items():
                where[_base(caller)] += n
    largest = [dict(function=_base(f), sites=s["sites"][f], ops_each=s["inlined"][f],
                    share=ops / total) for ops, f in shares if s["inlined"][f] > 0][:top]
    return dict(key=key, model=CASES[key].model, flow=CASES[key].flow, written=s["written"],
                inlined=total, solve_ops=solve, solve_share=solve / total,
                solve_sites=solve_sites, solve_callers=dict(where.most_common()),
                largest=largest,
                lower_s=time.perf_counter() - t0)


def table(rows: list[dict]) -> str:
    head = ("| model | flow | ops as written | ops inlined | multiplier solve: sites (by "
            "caller), share "
            "| largest functions (sites × ops each, share of the inlined program) |")
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        largest = "; ".join(f"`{f['function']}` {f['sites']} × {f['ops_each']} "
                            f"({100 * f['share']:.0f} %)" for f in r["largest"])
        callers = ", ".join(f"`{k}` {v}" for k, v in r["solve_callers"].items())
        solve = (f"{r['solve_sites']} sites ({callers}), {100 * r['solve_share']:.0f} %"
                 if r["solve_sites"] else "—")
        lines.append(f"| {r['model']} | {r['flow']} | {r['written']} | {r['inlined']} | {solve} "
                     f"| {largest} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    labels = [r["key"] for r in rows]
    solve = [r["solve_ops"] for r in rows]
    rest = [r["inlined"] - r["solve_ops"] for r in rows]
    ax.barh(labels, solve, color="tab:red", label="multiplier solve (all its sites)")
    ax.barh(labels, rest, left=solve, color="tab:gray", label="the rest")
    ax.invert_yaxis()
    ax.set_xlabel("StableHLO operations after inlining every call (what XLA compiles)")
    ax.set_title("Size of the compiled solve of ibflow.integrate, per case")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(CASES),
                    help=f"comma-separated case keys (default: all of {', '.join(CASES)})")
    ap.add_argument("--top", type=int, default=4, help="largest functions listed per case")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CASES]
    if unknown:
        ap.error(f"--models: unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.top < 1:
        ap.error("--top must be at least 1")
    rows = []
    for i, key in enumerate(keys, 1):
        rows.append(measure(key, args.top))
        print(f"[{i}/{len(keys)}] {key}: {rows[-1]['inlined']} ops inlined "
              f"({rows[-1]['lower_s']:.1f} s to lower)", file=sys.stderr, flush=True)
    md = table(rows)
    machine = C.machine()
    intro = ("Command: `python -m benchmarks.compile_ops` (lowering only, nothing compiled: the "
             "counts depend on the JAX stack's versions, not on the machine). See the module "
             "docstring for the columns.")
    C.write_report(args.out, "compile_ops", "Size of the compiled solve, per case", machine,
                   intro, md + "\n", lambda path: plot(rows, path))
    with open(os.path.join(args.out, "compile_ops.json"), "w") as f:
        json.dump({"machine": machine, "rows": rows}, f, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
