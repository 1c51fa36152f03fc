"""``python -m benchmarks.cache_probe [--d D --n N] [--sweep [--quick]]``: one small
``ibflow.integrate`` (or, with ``--sweep``, ``ibflow.sweep`` with default options on the
Figure 7.1 grid; ``--quick``: its tiny version) in a fresh process, reporting JAX's
persistent-cache events (hits, writes) and the wall time of the import and of the first call.
Run it twice with the same ``IBFLOW_CACHE_DIR`` to see the caches work
(tests/test_benchmarks_smoke.py does; `work_precision.py` reports the sweep's times).

Prints one JSON line: ``{"cache_dir", "hits", "misses", "import_s", "first_call_s", "loss",
"converged", "hit_modules", "written_modules"}`` (module names from JAX's debug log); with
``--sweep`` also ``"warm_s"`` (a second call in the same process) and ``"traced"`` (whether
this process traced the sweep's batch: every process does, the sweep's traced batch is not
kept across processes (``ibflow.integrate``'s solve is: ``ibflow/_programs.py``); what a
second process loads is the compiled program, counted in ``"hits"``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time

t_start = time.perf_counter()

import jax  # noqa: E402

_events: dict[str, int] = {}


def _count(event: str, **kwargs) -> None:
    _events[event] = _events.get(event, 0) + 1


jax.monitoring.register_event_listener(_count)


class _CacheLog(logging.Handler):
    """Collects the module names JAX logs (at debug level) for persistent-cache hits and writes."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.hit: list[str] = []
        self.written: list[str] = []

    def emit(self, record):
        msg = record.msg if isinstance(record.msg, str) else ""
        if msg.startswith("Persistent compilation cache hit for"):
            self.hit.append(str(record.args[0]))
        elif msg.startswith("Writing %s to persistent compilation cache"):
            self.written.append(str(record.args[0]))


_log = _CacheLog()
for _name in ("jax._src.compiler", "jax._src.compilation_cache"):
    logging.getLogger(_name).setLevel(logging.DEBUG)
    logging.getLogger(_name).addHandler(_log)
    logging.getLogger(_name).propagate = False

import ibflow  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cache_probe")
    ap.add_argument("--d", type=int, default=40)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--sweep", action="store_true", help="the Figure 7.1 sweep, default options")
    ap.add_argument("--quick", action="store_true", help="with --sweep: the tiny grid")
    args = ap.parse_args(argv)
    import_s = time.perf_counter() - t_start
    if args.sweep:
        return _sweep(args.quick, import_s)
    data = ibflow.data.sparse_regression(jax.random.key(1993), n=args.n, d=args.d, k=3)
    model = ibflow.DiagonalNet.from_scale_shape(0.01, 0.5, dim=args.d)
    t0 = time.perf_counter()
    sol = jax.block_until_ready(ibflow.integrate(model, data.X, data.y, throw=False))
    first_call_s = time.perf_counter() - t0
    print(json.dumps({
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "hits": _events.get("/jax/compilation_cache/cache_hits", 0),
        "misses": _events.get("/jax/compilation_cache/cache_misses", 0),
        "hit_modules": sorted(set(_log.hit)), "written_modules": sorted(set(_log.written)),
        "import_s": round(import_s, 3), "first_call_s": round(first_call_s, 3),
        "loss": float(sol.loss),
        "converged": bool(sol.status == ibflow.Status.converged)}))
    return 0


def _sweep(quick: bool, import_s: float) -> int:
    import equinox as eqx
    import numpy as np

    from ibflow._sweep.executor import _integrate_batch

    from ._common import problem
    from .ibflow_grid import _ShapeScaleDiagonal

    p = problem(quick)
    grid = ibflow.Grid(shape=np.unique(p.shapes), scale=np.unique(p.alphas))

    def call():
        res = ibflow.sweep(_ShapeScaleDiagonal(p.d), grid, (p.X, p.y), references=(),
                           progress=False)
        return res, np.asarray(res["predictor"])

    t0 = time.perf_counter()
    res, _ = call()
    first_call_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    call()
    warm_s = time.perf_counter() - t0
    print(json.dumps({
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "hits": _events.get("/jax/compilation_cache/cache_hits", 0),
        "misses": _events.get("/jax/compilation_cache/cache_misses", 0),
        "import_s": round(import_s, 3), "first_call_s": round(first_call_s, 3),
        "warm_s": round(warm_s, 3), "traced": eqx.debug.get_num_traces(_integrate_batch) > 0,
        "loss": float(np.max(res["loss"])), "converged": bool(np.all(res.converged))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
