"""``python -m benchmarks.compile [--quick] [--models KEY,KEY...] [--out DIR]``: how long a user
waits for the first call of ``ibflow.integrate``, for every shipped model and flow.

Per case (a model, a flow, small data; ``--models`` takes the keys of `CASES`), two fresh
Python processes share one new, empty compilation-cache directory (``IBFLOW_CACHE_DIR``):

- **cold**: the first process. Wall time of the import (``import jax``, ``import ibflow``,
  ``ibflow.integrate`` resolved) and of the first ``ibflow.integrate(...)`` call up to
  ``jax.block_until_ready``, the call split into tracing, lowering (jaxpr → MLIR) and XLA
  compilation from JAX's own log (``jax_log_compiles``: the ``Finished tracing …``, ``Finished
  jaxpr to MLIR module conversion …`` and ``Finished XLA compilation …`` messages, summed over
  every jit the call compiles; an entry inside another's interval, such as an eager operation
  compiled while ``solve`` is traced, is counted once, by the outer one); the rest ("other") is
  Python, the solve itself and the cache write.
- **cached**: the second process, whose first call loads the compiled programs from the cache
  and reads the traced solve that the first one exported (`ibflow._programs`), so it neither
  traces nor lowers it; except where the configuration holds a class of the user's (README's
  ``MyNet``, the warped flow's warp), which is traced again in every process.
- **warm**: the median of three more calls in the cached process.

Each measurement is a child process (``--child KEY``) that prints one JSON line; the parent
collects them, prints the markdown table and writes ``DIR/compile.md`` (with the machine and the
command), ``DIR/compile.json`` (the rows) and ``DIR/compile.png`` (per case, the cold call split
into trace / lower / XLA / other next to the cached call; lines at the targets, 10 s cold and
2 s cached). Default ``DIR``: ``benchmarks/results``. ``--quick``: the DiagonalNet case only.

Data: ``numpy.random.default_rng(0)`` Gaussians for ``X`` and ``y`` (labels ``sign(y)`` for the
classifier), except for the README's ``MyNet``, which keeps the README's data.

This module imports only the standard library at the top, so that a child's import time is
JAX's and ibflow's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

_T_START = time.perf_counter()

#: Targets of the first call's wall time (seconds): a fresh process with an empty cache, and one
#: whose cache holds the case's programs.
COLD_TARGET_S, CACHED_TARGET_S = 10.0, 2.0
WARM_RUNS = 3
CHILD_TIMEOUT_S = 180
#: The loggers whose records carry JAX's compile timings and cache events.
LOGGERS = ("jax._src.dispatch", "jax._src.interpreters.pxla", "jax._src.compiler")
_PHASES = {
    "trace": re.compile(r"^Finished tracing (?:\+ transforming )?.+ for jit in ([0-9.eE+-]+) sec"),
    "lower": re.compile(r"^Finished jaxpr to MLIR module conversion .+ in ([0-9.eE+-]+) sec"),
    "xla": re.compile(r"^Finished XLA compilation of .+ in ([0-9.eE+-]+) sec"),
}


# ----------------------------------------------------------------------------------------------
# The cases. Each builder runs in the child, after the import is timed: it imports what it
# needs and returns (model, X, y, keyword arguments of `integrate` other than throw).
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    key: str
    model: str
    flow: str
    build: Callable[[], tuple]


CASES: dict[str, Case] = {}


def _case(key: str, model: str, flow: str):
    def register(build):
        CASES[key] = Case(key, model, flow, build)
        return build

    return register


def _data(n: int, d: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.standard_normal((n, d)), rng.standard_normal(n)


def _key():
    import jax

    return jax.random.key(0)


@_case("diagonal", "DiagonalNet d=1000, n=100", "GradientFlow() (reduction, Newton tail)")
def _diagonal():
    import ibflow

    X, y = _data(100, 1000)
    return ibflow.DiagonalNet.from_scale_shape(0.1, 0.5, dim=1000), X, y, {}


@_case("diagonal-mirror", "DiagonalNet d=1000, n=100", "MirrorFlow(CubicPotential())")
def _diagonal_mirror():
    import ibflow

    model, X, y, _ = _diagonal()
    return model, X, y, {"flow": ibflow.MirrorFlow(ibflow.CubicPotential())}


@_case("diagonal-warped", "DiagonalNet d=1000, n=100", "WarpedFlow(GradientFlow(), 1/(1+L))")
def _diagonal_warped():
    import equinox as eqx

    import ibflow

    class Slowdown(eqx.Module):
        """``g = 1/(1 + L)``: a warp as a module (no array to sweep, so no field)."""

        def __call__(self, model, loss):
            return 1.0 / (1.0 + loss)

    model, X, y, _ = _diagonal()
    return model, X, y, {"flow": ibflow.WarpedFlow(ibflow.GradientFlow(), Slowdown())}


@_case("mynet", "plain eqx.Module (README's MyNet), n=4, d=3", "GradientFlow()")
def _mynet():
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class MyNet(eqx.Module):  # README.md's "Any model" block, model and data as there
        W: jax.Array
        a: jax.Array

        def __call__(self, x):
            return self.a @ jnp.tanh(self.W @ x)

    kx, kw, ka = jax.random.split(jax.random.key(1), 3)
    X = jax.random.normal(kx, (4, 3))
    y = jnp.sin(X[:, 0])
    model = MyNet(jax.random.normal(kw, (8, 3)), 0.5 * jax.random.normal(ka, (8,)))
    return model, X, y, {}


@_case("fc", "FullyConnectedNet width 10, d=1000, n=100", "GradientFlow()")
def _fc():
    import ibflow

    X, y = _data(100, 1000)
    model = ibflow.FullyConnectedNet.from_scale_shape(0.1, 0.5, dim=1000, width=10, key=_key())
    return model, X, y, {}


@_case("leaky", "LeakyReLUNeuron d=30, n=8", "GradientFlow() (through kinks)")
def _leaky():
    import ibflow

    X, y = _data(8, 30)
    return ibflow.LeakyReLUNeuron.from_scale_shape(0.1, 0.3, dim=30, key=_key()), X, y, {}


@_case("two-layer-relu", "TwoLayerNet ReLU d=5, width 10, n=10", "GradientFlow() (through kinks)")
def _two_layer_relu():
    import ibflow

    X, y = _data(10, 5)
    model = ibflow.TwoLayerNet.from_scale_shape(0.1, 0.5, dim=5, width=10,
                                                activation=ibflow.ReLU(), key=_key())
    return model, X, y, {}


@_case("shallow", "ShallowNet ReLU width 16, n=8", "GradientFlow() (through kinks)")
def _shallow():
    import ibflow

    X, y = _data(8, 1)
    return ibflow.ShallowNet.init(16, output_std=1.0, key=_key()), X, y, {}


@_case("mlp", "MLP tanh depth 3 (widths 8, 8), d=10, n=10", "GradientFlow()")
def _mlp():
    import ibflow

    X, y = _data(10, 10)
    model = ibflow.MLP.from_scale_shape(0.5, 0.2, dim=10, widths=(8, 8),
                                        activation=ibflow.Tanh(), key=_key())
    return model, X, y, {}


@_case("mlp-relu", "MLP ReLU depth 3 (widths 8, 8), d=10, n=10",
       "GradientFlow() (through kinks, coupled)")
def _mlp_relu():
    import ibflow

    X, y = _data(10, 10)
    model = ibflow.MLP.from_scale_shape(0.5, 0.2, dim=10, widths=(8, 8),
                                        activation=ibflow.ReLU(), bias=True, key=_key())
    return model, X, y, {}


@_case("linear", "LinearModel d=50, n=10", "GradientFlow()")
def _linear():
    import jax.numpy as jnp

    import ibflow

    X, y = _data(10, 50)
    return ibflow.LinearModel(jnp.zeros(50)), X, y, {}


@_case("classifier", "TwoLayerClassifier leaky (γ=0.3) width 6, d=20, n=10",
       "GradientFlow(), logistic loss to 1e-2 (reduction, through kinks)")
def _classifier():
    import numpy as np

    import ibflow

    X, y = _data(10, 20)
    model = ibflow.TwoLayerClassifier.init(dim=20, width=6, init_std=0.3, slope=0.3, key=_key())
    return model, X, np.sign(y), {"loss": ibflow.LogisticLoss(), "target_loss": 1e-2}


@_case("classifier-parameters", "TwoLayerClassifier leaky (γ=0.3) width 6, d=20, n=10",
       "GradientFlow(), logistic loss to 1e-2, ParameterSpace()")
def _classifier_parameters():
    import ibflow

    model, X, y, kwargs = _classifier()
    return model, X, y, {**kwargs, "formulation": ibflow.ParameterSpace()}


QUICK = ("diagonal",)
#: Left out, with the reason (the table's notes).
NOT_RUN = (
    "`ParameterSpace()` for LeakyReLUNeuron, TwoLayerNet ReLU and ShallowNet: none offers a "
    "reduction, so the default `PreferReduction()` already integrates their parameters through "
    "the kinks (the same program as the rows above); it differs only for the reducible "
    "TwoLayerClassifier (its own row).",
    "TwoLayerClassifier on the square loss: a classifier; it runs on the logistic loss with "
    "target 1e-2 (the default target, 1e-24·mean(y²)/2, is out of reach of a real-time "
    "gradient flow whose loss decays like 1/t; `LossClock` is the flow for that).",
)


# ----------------------------------------------------------------------------------------------
# The child: one process, one case, one JSON line.
# ----------------------------------------------------------------------------------------------


class _CompileLog(logging.Handler):
    """Collects JAX's logged trace / lower / XLA-compile timings (every jit) since `clear()`.

    `totals` sums them per phase, leaving out an entry that lies inside another one's interval
    (an eager operation compiled while ``solve`` is being traced), which the outer entry already
    counts: so trace + lower + XLA never exceeds the call's wall time."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.clear()

    def clear(self):
        self.entries: list[tuple[str, float, float]] = []  # (phase, start, end), time.time()

    def emit(self, record):
        message = record.getMessage()
        for phase, pattern in _PHASES.items():
            match = pattern.match(message)
            if match:
                self.entries.append((phase, record.created - float(match.group(1)),
                                     record.created))

    def totals(self) -> tuple[dict[str, float], dict[str, int]]:
        seconds, counts = dict.fromkeys(_PHASES, 0.0), dict.fromkeys(_PHASES, 0)
        for i, (phase, start, end) in enumerate(self.entries):
            counts[phase] += 1
            nested = any(j != i and s <= start and end <= e and e - s > end - start
                         for j, (_, s, e) in enumerate(self.entries))
            if not nested:
                seconds[phase] += end - start
        return seconds, counts


def child(key: str, warm_runs: int) -> dict:
    """Import, build the case, time the first `integrate` call (split from JAX's log) and
    `warm_runs` later calls; the import is timed from this module's first line."""
    import jax

    jax.config.update("jax_log_compiles", True)
    log = _CompileLog()
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(log)
        logger.propagate = False  # jax_log_compiles' warnings go to the handler, not stderr
    events: dict[str, int] = {}

    def count(event: str, **kwargs) -> None:
        events[event] = events.get(event, 0) + 1

    jax.monitoring.register_event_listener(count)
    import ibflow
    from ibflow._status import STATUS_NAMES

    integrate = ibflow.integrate  # resolves the lazy import and turns the cache on
    import_s = time.perf_counter() - _T_START

    import jax.numpy as jnp

    model, X, y, kwargs = CASES[key].build()
    X, y = jax.block_until_ready((jnp.asarray(X, dtype=float), jnp.asarray(y, dtype=float)))
    jax.block_until_ready([x for x in jax.tree_util.tree_leaves(model)
                           if isinstance(x, jax.Array)])

    def call():
        return jax.block_until_ready(integrate(model, X, y, throw=False, **kwargs))

    log.clear()
    t0 = time.perf_counter()
    sol = call()
    first_s = time.perf_counter() - t0
    split, counts = log.totals()
    warm = []
    for _ in range(warm_runs):
        t0 = time.perf_counter()
        call()
        warm.append(time.perf_counter() - t0)
    return {
        "case": key, "import_s": import_s, "first_s": first_s,
        "trace_s": split["trace"], "lower_s": split["lower"], "xla_s": split["xla"],
        "traces": counts["trace"], "lowerings": counts["lower"], "xla_compiles": counts["xla"],
        "warm_s": warm, "status": STATUS_NAMES[int(sol.status._value)],
        "loss": float(sol.loss), "steps": int(sol.steps),
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "cache_hits": events.get("/jax/compilation_cache/cache_hits", 0),
        "cache_misses": events.get("/jax/compilation_cache/cache_misses", 0),
    }


# ----------------------------------------------------------------------------------------------
# The parent: two children per case, the table, the JSON, the figure.
# ----------------------------------------------------------------------------------------------


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ok(row: dict) -> bool:
    return "error" not in row["cold"] and "error" not in row["cached"]


def _run_child(key: str, cache_dir: str, warm_runs: int) -> dict:
    env = dict(os.environ, IBFLOW_CACHE_DIR=cache_dir)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # else ibflow keeps the user's directory
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.compile", "--child", key,
             "--warm-runs", str(warm_runs)],
            cwd=root, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"child timed out after {CHILD_TIMEOUT_S} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def measure(key: str, log: Callable[[str], None] = _progress) -> dict:
    """The cold and the cached process of case `key`, with a new cache directory of their own."""
    cache_dir = tempfile.mkdtemp(prefix="ibflow-compile-")
    try:
        cold = _run_child(key, cache_dir, 0)
        cached = _run_child(key, cache_dir, WARM_RUNS) if "error" not in cold else {}
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    case = CASES[key]
    row = {"case": key, "model": case.model, "flow": case.flow, "cold": cold, "cached": cached}
    log(f"{key}: " + (cold.get("error") or cached.get("error") or
                      f"cold {cold['first_s']:.2f} s, cached {cached['first_s']:.2f} s, "
                      f"warm {1e3 * statistics.median(cached['warm_s']):.1f} ms, "
                      f"{cold['status']}"))
    return row


def _status(row: dict) -> str:
    cold, cached = row["cold"], row["cached"]
    if "error" in cold or "error" in cached:
        return "failed: " + (cold.get("error") or cached.get("error"))
    if cold["status"] == cached["status"]:
        return cold["status"]
    return f"{cold['status']} (cached process: {cached['status']})"


def _s(v, digits=2) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def table(rows: list[dict]) -> str:
    lines = ["| model | flow | import s | cold first call s | trace s | lower s | XLA s | "
             "cached first call s | warm ms | status |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cold, cached = r["cold"], r["cached"]
        warm = cached.get("warm_s")
        lines.append(
            f"| {r['model']} | {r['flow']} | {_s(cold.get('import_s'))} | "
            f"{_s(cold.get('first_s'))} | {_s(cold.get('trace_s'))} | "
            f"{_s(cold.get('lower_s'))} | {_s(cold.get('xla_s'))} | "
            f"{_s(cached.get('first_s'))} | "
            f"{_s(1e3 * statistics.median(warm), 1) if warm else ''} | {_status(r)} |")
    return "\n".join(lines)


def notes(rows: list[dict]) -> str:
    out = [f"- Targets: cold first call ≤ {COLD_TARGET_S:g} s, cached first call ≤ "
           f"{CACHED_TARGET_S:g} s. Cold = trace + lower + XLA + other (Python, the solve, the "
           "cache write, the program export). The cached call reads the traced solve "
           "(`ibflow-programs/`) and JAX's compiled executable, except where the configuration "
           "holds a class of the user's (MyNet; the warp of the warped case), which it traces "
           "again."]
    done = [r for r in rows if _ok(r)]
    if done:
        out.append("- Compiled programs per cold call (XLA compilations, every jit) / persistent-"
                   "cache hits in the cached call: " + ", ".join(
                       f"{r['case']} {r['cold']['xla_compiles']}/{r['cached']['cache_hits']}"
                       for r in done) + ".")
    out += [f"- Not run: {n}" for n in NOT_RUN]
    return "\n".join(out)


def figure(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if _ok(r)]
    fig, ax = plt.subplots(figsize=(10, 2.2 + 0.5 * max(len(done), 1)))
    parts = (("trace_s", "trace", "C0"), ("lower_s", "lower", "C1"), ("xla_s", "XLA compile", "C3"))
    for i, r in enumerate(done):
        cold, y = r["cold"], len(done) - 1 - i
        left = 0.0
        for field, label, color in parts:
            ax.barh(y + 0.2, cold[field], 0.38, left=left, color=color,
                    label=label if i == 0 else None)
            left += cold[field]
        ax.barh(y + 0.2, max(cold["first_s"] - left, 0.0), 0.38, left=left, color="0.7",
                label="other (Python, solve, cache write)" if i == 0 else None)
        ax.barh(y - 0.2, r["cached"]["first_s"], 0.38, color="C2",
                label="cached first call" if i == 0 else None)
    ax.axvline(COLD_TARGET_S, color="k", ls="--", lw=0.9, zorder=3,
               label=f"cold target {COLD_TARGET_S:g} s")
    ax.axvline(CACHED_TARGET_S, color="darkgreen", ls=":", lw=1.4, zorder=3,
               label=f"cached target {CACHED_TARGET_S:g} s")
    ax.set_yticks(range(len(done)))
    ax.set_yticklabels([f"{r['case']}" for r in reversed(done)], fontsize=8)
    ax.set(xlabel="first call of ibflow.integrate (s): cold (upper bar), cached (lower bar)",
           title="Time to the first result, per model and flow")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(keys, log: Callable[[str], None] = _progress) -> list[dict]:
    """The cold and cached measurements of the cases `keys`, one after another."""
    return [measure(k, log) for k in keys]


def summary_rows(results: list[dict]) -> list:
    """Rows of `python -m benchmarks`' table (section 8): per case, compile = the cold call's
    trace + lower + XLA, run = the warm median, value = the cold first call."""
    from ._common import Row

    out = []
    for r in results:
        label = f"first call of integrate: {r['model']}, {r['flow']}"
        if not _ok(r):
            out.append(Row("8", label, 1, note=_status(r)))
            continue
        cold, cached = r["cold"], r["cached"]
        out.append(Row(
            "8", label, 1, compile_s=cold["trace_s"] + cold["lower_s"] + cold["xla_s"],
            run_s=statistics.median(cached["warm_s"]), value=cold["first_s"],
            note=f"value = cold first call [s] (fresh process, empty cache); cached first call "
                 f"{cached['first_s']:.2f} s; import {cold['import_s']:.2f} s; {_status(r)}"))
    return out


def target_rows(results: list[dict]) -> list:
    """The two targets (slowest case): cold first call ≤ 10 s, cached first call ≤ 2 s."""
    from ._common import Row

    done = [r for r in results if _ok(r)]
    out = []
    for which, target in (("cold", COLD_TARGET_S), ("cached", CACHED_TARGET_S)):
        name = f"first call of integrate, {which}, slowest case [s]"
        if not done:
            out.append(Row("T", name, target=f"≤ {target:g} s", note="not run"))
            continue
        worst = max(done, key=lambda r: r[which]["first_s"])
        value = worst[which]["first_s"]
        out.append(Row("T", name, value=value, target=f"≤ {target:g} s",
                       passed=value <= target,
                       note=f"{worst['case']}, the slowest of {len(done)} (benchmarks/compile.py)"))
    return out


def markdown(results: list[dict]) -> str:
    return table(results) + "\n\n" + notes(results) + "\n"


def write(results: list[dict], machine: dict, out_dir: str, command: str) -> dict[str, str]:
    """``compile.md`` (the machine, the command, the table), ``compile.json``, ``compile.png``."""
    from . import _common as C

    intro = (f"Command: `{command}` (JAX {machine['jax']}). Each case: two fresh processes with "
             "one new `IBFLOW_CACHE_DIR`; the first call of `ibflow.integrate` (`throw=False`) "
             "to `jax.block_until_ready`, cold (empty cache, split from JAX's compile log) and "
             f"cached (second process); warm: the median of {WARM_RUNS} later calls in the "
             "cached process.")
    paths = C.write_report(out_dir, "compile", "Time to the first call of ibflow.integrate",
                           machine, intro, markdown(results),
                           lambda path: figure(results, path))
    paths["json"] = os.path.join(out_dir, "compile.json")
    with open(paths["json"], "w") as f:
        json.dump({"machine": machine, "command": command, "rows": results}, f, indent=1)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the DiagonalNet case only")
    ap.add_argument("--models", default=None,
                    help="comma-separated case keys: " + ", ".join(CASES))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"),
                    help="where compile.md, compile.json and compile.png go")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm-runs", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.warm_runs)))
        return 0
    if args.models is not None:
        keys = [k.strip() for k in args.models.split(",") if k.strip()]
        unknown = [k for k in keys if k not in CASES]
        if unknown:
            ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    else:
        keys = list(QUICK if args.quick else CASES)

    from . import _common as C

    machine = C.machine()
    command = " ".join(["python -m benchmarks.compile",
                        *(sys.argv[1:] if argv is None else argv)])
    results = run(keys)
    print(markdown(results))
    paths = write(results, machine, args.out, command)
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
