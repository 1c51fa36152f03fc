"""Shared pieces of the benchmarks: the Figure 7.1 problem, timing helpers, the machine
description, result rows, and the table writers (markdown / CSV / JSON).

Timing rules (STYLE.md, "Tooling"): every JAX function is called once first to compile (that
call's wall time minus one run is reported as the compile time), results are waited for with
``jax.block_until_ready``, and the run time is the median over several runs.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import ibflow

# ----------------------------------------------------------------------------------------------
# The problem of theory §2.8 ("Figure 7.1"): sparse regression, d = 1000, n = 100, 5 shapes × 20
# scales, unbiased diagonal net.
# ----------------------------------------------------------------------------------------------

SHAPES = (0.0, 0.5, 0.7, 0.9, 0.99)
SEED = 1993
GD_STEP = 1e-3
GD_TARGET = 1e-10  # ½·mean(r²), the GD loop's stopping loss (docs/theory §2.8, "Q vs GD check")


@dataclasses.dataclass(frozen=True)
class Problem:
    """The data and the (shape, scale) grid; ``alphas``/``shapes`` are flat, one per config."""

    X: np.ndarray
    y: np.ndarray
    alphas: np.ndarray
    shapes: np.ndarray
    quick: bool

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def size(self) -> int:
        return self.alphas.shape[0]

    def describe(self) -> str:
        return f"d={self.d}, n={self.n}, {self.size} configs"


def grid(n_shapes: int, n_scales: int) -> tuple[np.ndarray, np.ndarray]:
    """The Figure 7.1 grid, shape-major: ``alphas = logspace(−5, −0.6, n_scales)`` for each of
    the first `n_shapes` shapes of ``SHAPES``."""
    alphas = np.logspace(-5, -0.6, n_scales)
    shapes = np.asarray(SHAPES[:n_shapes])
    s, a = np.meshgrid(shapes, alphas, indexing="ij")
    return a.ravel(), s.ravel()


def problem(quick: bool, *, n: int | None = None, d: int | None = None) -> Problem:
    """Figure 7.1 (d = 1000, n = 100, 5 × 20 grid), or a tiny version with ``quick``
    (d = 60, n = 12, 2 shapes × 3 scales)."""
    if quick:
        n, d = n or 12, d or 60
        alphas, shapes = grid(2, 3)
    else:
        n, d = n or 100, d or 1000
        alphas, shapes = grid(5, 20)
    data = ibflow.data.sparse_regression(jax.random.key(SEED), n=n, d=d)
    return Problem(np.asarray(data.X), np.asarray(data.y), alphas, shapes, quick)


def sample(size: int, count: int) -> np.ndarray:
    """`count` configuration indices spread evenly over ``range(size)`` (deterministic), so a
    sample covers small and large scales and several shapes."""
    count = min(count, size)
    return np.unique(np.round(np.linspace(0, size - 1, count)).astype(int))


def k_of(alpha, shape):
    """``k = 4α(1+s²)/(1−s²)`` (docs/theory [AZ-7.1])."""
    return 4 * alpha * (1 + shape**2) / (1 - shape**2)


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Timing:
    compile_s: float  # first call minus the median run (NaN for non-JAX code)
    run_s: float  # median over `runs` runs
    runs: int
    all_s: list[float]
    result: Any = None
    recompile_s: float = 0.0  # median compile time still paid by each later call


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_intervals: list[tuple[float, float]] = []


def _listener(event: str, duration: float, **kwargs) -> None:
    if event in _COMPILE_EVENTS:
        end = time.perf_counter()
        _intervals.append((end - duration, end))


jax.monitoring.register_event_duration_secs_listener(_listener)


def compile_seconds_since(start: float) -> float:
    """Wall time spent tracing, lowering and compiling (JAX's own compile events) since
    `start` (a ``time.perf_counter()`` value); nested events are counted once (interval union)."""
    spans = sorted((max(a, start), b) for a, b in _intervals if b > start)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in spans:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def time_jax(fn: Callable[[], Any], *, runs: int = 3) -> Timing:
    """Call `fn` once to compile, then `runs` more times; block on every result.

    ``compile_s`` is the compile time of the first call (JAX's trace/lower/compile events).
    ``run_s`` is the median over the later calls of their wall time minus any compile time they
    still incur (e.g. a function that rebuilds its jitted closure on every call)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first_compile = compile_seconds_since(t0)
    first_run = time.perf_counter() - t0 - first_compile
    times, recompiles = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        wall = time.perf_counter() - t0
        recompiles.append(compile_seconds_since(t0))
        times.append(wall - recompiles[-1])
    if not times:  # runs=0: the first call's wall time minus its compile time
        return Timing(first_compile, first_run, 1, [first_run], out)
    return Timing(first_compile, statistics.median(times), runs, times, out,
                  statistics.median(recompiles))


def time_host(fn: Callable[[], Any], *, runs: int = 3) -> Timing:
    """Median wall time of a host (numpy/scipy) function over `runs` calls; no compile step."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return Timing(math.nan, statistics.median(times), runs, times, out)


def rel_dist(w, ref) -> np.ndarray:
    """``‖w − ref‖₂ / ‖ref‖₂`` along the last axis."""
    w, ref = np.asarray(w), np.asarray(ref)
    return np.linalg.norm(w - ref, axis=-1) / np.linalg.norm(ref, axis=-1)


# ----------------------------------------------------------------------------------------------
# Rows and tables
# ----------------------------------------------------------------------------------------------

COLUMNS = ("section", "row", "configs", "compile_s", "run_s", "per_config_s", "steps", "dist",
           "value", "target", "pass", "note")
HEADERS = {"section": "§", "row": "benchmark", "configs": "configs", "compile_s": "compile [s]",
           "run_s": "run [s]", "per_config_s": "per config [s]", "steps": "steps",
           "dist": "dist. to argmin Q", "value": "value", "target": "target", "pass": "pass",
           "note": "note"}


@dataclasses.dataclass
class Row:
    """One line of the table. `run_s` is a median wall time; `dist` the relative ℓ2 distance of
    the limit point(s) to the Theorem-1 minimizer (max over the configs timed); `value` is the
    row's headline number when it is not a time (a ratio, a fraction, a rate) with `target` and
    `pass` for the rows that check a target."""

    section: str
    row: str
    configs: int | None = None
    compile_s: float | None = None
    run_s: float | None = None
    per_config_s: float | None = None
    steps: float | str | None = None
    dist: float | None = None
    value: float | str | None = None
    target: str | None = None
    passed: bool | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pass"] = d.pop("passed")
        return {k: d[k] for k in COLUMNS}


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "PASS" if v else "FAIL"
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return "nan"
        if v == 0:
            return "0"
        if math.isinf(v):
            return "inf"
        a = abs(v)
        return f"{v:.3g}" if 1e-3 <= a < 1e5 else f"{v:.2e}"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v).replace("|", "\\|")


def markdown(rows: list[Row], machine: dict[str, Any]) -> str:
    lines = ["**Machine:** " + ", ".join(f"{k}: {v}" for k, v in machine.items()), "",
             "| " + " | ".join(HEADERS[c] for c in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        d = r.as_dict()
        lines.append("| " + " | ".join(_fmt(d[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def _jsonable(v):
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def write(rows: list[Row], machine: dict[str, Any], out_dir: str) -> dict[str, str]:
    """Write ``latest.md``, ``latest.csv`` and ``latest.json`` under `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {ext: os.path.join(out_dir, f"latest.{ext}") for ext in ("md", "csv", "json")}
    with open(paths["md"], "w") as f:
        f.write(markdown(rows, machine))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _jsonable(v) for k, v in r.as_dict().items()})
    with open(paths["csv"], "w") as f:
        f.write(buf.getvalue())
    with open(paths["json"], "w") as f:
        json.dump({"machine": machine,
                   "rows": [{k: _jsonable(v) for k, v in r.as_dict().items()} for r in rows]},
                  f, indent=1)
    return paths


def write_report(out_dir: str, stem: str, title: str, machine: dict[str, Any], intro: str,
                 body: str, draw: Callable[[str], None]) -> dict[str, str]:
    """Write a one-table benchmark's ``stem.md`` (title, the machine, `intro`, `body`) and its
    figure ``stem.png`` (``draw(path)``) under `out_dir`; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {ext: os.path.join(out_dir, f"{stem}.{ext}") for ext in ("md", "png")}
    with open(paths["md"], "w") as f:
        f.write(f"# {title}\n\n**Machine:** "
                + ", ".join(f"{k}: {v}" for k, v in machine.items()) + f"\n\n{intro}\n\n"
                + body)
    draw(paths["png"])
    return paths


def machine() -> dict[str, Any]:
    """CPU model (``/proc/cpuinfo``), cores, load, jax version and devices."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "n/a"
    return {"cpu": cpu, "cores": os.cpu_count(), "load average (1/5/15 min) at start": load,
            "python": platform.python_version(), "jax": jax.__version__,
            "numpy": np.__version__, "devices": ", ".join(str(d) for d in jax.devices()),
            "date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def has_gpu() -> bool:
    return any(d.platform == "gpu" for d in jax.devices())
