"""``python -m benchmarks.gpu [--small] [--out DIR]``: the accelerator rows of issue 14.

The Figure 7.1 problem (d = 1000, n = 100, seed-1993 data of docs/theory §2.8) on a grid of 10⁴
configurations (100 shapes in [0, 0.99] × 100 scales in [1e-5, 10^-0.6]), integrated to its
limit by ``ibflow.sweep`` with **default options** on the first device JAX sees:

1. **Chunk size by measurement.** The grid at several ``chunk_size`` values: compile time and the
   warm wall time of one call; flows/s; the useful float64 rate (Σ Newton iterations ×
   ``ibflow_grid.newton_iteration_flops``, as the CPU roofline row counts it) over the device's
   measured float64 matmul rate.
2. **The work–precision point.** Every member's limit against the Theorem-1 minimizer
   (``reference.minimizers``), max and median relative distance.
3. **Device against CPU.** A 10 × 10 sub-grid (every tenth shape and scale) integrated again on
   the host CPU in the same process (``devices=jax.devices("cpu")``), and, when
   ``--cpu-reference FILE`` is given, against limits computed elsewhere (e.g. on the project's
   2-core CPU with the pinned JAX family; ``--write-cpu-reference FILE`` writes such a file).

Prints one line per step as it goes and writes ``gpu.{md,json,png}`` under ``--out``. It runs on
a CPU too (then "device" is the CPU; ``--small`` is the smoke test's size). ``--profile``: where
a chunk's time goes (`profile`); ``--first-call CHUNK``: a process's first and warm call (run
twice with one ``IBFLOW_CACHE_DIR``: the persistent caches).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np

import ibflow

from . import reference, roofline
from ._common import SEED, rel_dist, time_jax
from .ibflow_grid import newton_iteration_flops, sweep_with

#: The grid's ranges: Figure 7.1's scales, its shapes 0 … 0.99 filled in.
SCALES = (-5.0, -0.6)  # log10
SHAPES = (0.0, 0.99)
#: Chunk sizes measured by default.
CHUNKS = (128, 512, 1024, 2048, 10_000)


def _say(msg: str) -> None:
    print(f"[gpu {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def axes(n_shapes: int, n_scales: int) -> tuple[np.ndarray, np.ndarray]:
    return np.linspace(*SHAPES, n_shapes), np.logspace(*SCALES, n_scales)


def run_sweep(X, y, shapes, scales, *, chunk_size: int | None, devices, runs: int):
    """``ibflow.sweep`` with default integrate options on the shape-major grid of `shapes` ×
    `scales` (``ibflow_grid.sweep_with``); returns (Timing, per-member arrays: w, steps, time,
    loss, status)."""
    s, a = np.meshgrid(shapes, scales, indexing="ij")
    t = time_jax(lambda: sweep_with(X, y, a.ravel(), s.ravel(), chunk_size=chunk_size,
                                    devices=devices), runs=runs)
    return t, t.result


def write_cpu_reference(path: str, small: bool) -> None:
    """The 10 × 10 sub-grid's limits on this machine's CPU (``--write-cpu-reference``)."""
    X, y, shapes, scales = problem(small)
    sub_shapes, sub_scales = shapes[::10], scales[::10]
    _, res = run_sweep(X, y, sub_shapes, sub_scales, chunk_size=8,
                       devices=jax.devices("cpu"), runs=0)
    np.savez(path, shapes=sub_shapes, scales=sub_scales, w=res["w"],
             status=res["status"], jax=jax.__version__, machine=platform.processor() or "cpu")
    _say(f"wrote {path}: {len(sub_shapes) * len(sub_scales)} limits, jax {jax.__version__}")


def problem(small: bool):
    """The Figure 7.1 data (X, y) and the grid's shapes and scales (``--small``: d = 60,
    n = 12, 20 × 20)."""
    n, d, count = (12, 60, 20) if small else (100, 1000, 100)
    data = ibflow.data.sparse_regression(jax.random.key(SEED), n=n, d=d)
    shapes, scales = axes(count, count)
    return np.asarray(data.X), np.asarray(data.y), shapes, scales


def _versions() -> dict[str, str]:
    import diffrax
    import equinox
    import lineax
    import optax
    import optimistix

    return {m.__name__: m.__version__ for m in (jax, diffrax, equinox, lineax, optimistix, optax)}


def run(*, small: bool, chunks: list[int], budget_s: float, cpu_reference: str | None,
        out_dir: str) -> dict:
    t_start = time.perf_counter()
    device = jax.devices()[0]
    X, y, shapes, scales = problem(small)
    n, d = X.shape
    size = len(shapes) * len(scales)
    info = dict(device=str(getattr(device, "device_kind", device.platform)),
                platform=device.platform, n=n, d=d, configs=size, versions=_versions(),
                date=time.strftime("%Y-%m-%d"))
    _say(f"{info}")

    # --- the device's float64 ceilings --------------------------------------------------------
    big = 512 if small else 8192
    big_rate, _ = roofline.matmul_rate(big, big, big, runs=3 if small else 10)
    info["matmul_f64_square"] = dict(size=big, flops_per_s=big_rate)
    _say(f"float64 matmul {big}³: {big_rate / 1e12:.3g} TFLOP/s")

    # --- the grid at each chunk size ----------------------------------------------------------
    by_chunk, best = [], None
    for c in chunks:
        if by_chunk and time.perf_counter() - t_start > budget_s:
            _say(f"chunk {c}: skipped (budget {budget_s:.0f} s spent)")
            continue
        t, res = run_sweep(X, y, shapes, scales, chunk_size=c, devices=[device], runs=2)
        flops = float(np.sum(res["steps"])) * newton_iteration_flops(n, d, min(c, size))
        g_rate, _ = roofline.matmul_rate(min(c, size), n, d, chained=True, runs=3)
        e = dict(chunk=c, compile_s=t.compile_s, run_s=t.run_s, all_s=t.all_s,
                 flows_per_s=size / t.run_s, useful_flops=flops, useful_rate=flops / t.run_s,
                 grid_matmul_rate=g_rate,
                 converged=int((res["status"] == 0).sum()),
                 steps_mean=float(np.mean(res["steps"])), steps_max=int(np.max(res["steps"])))
        e["fraction_of_f64"] = e["useful_rate"] / max(big_rate, g_rate)
        by_chunk.append(e)
        _say(f"chunk {c}: compile {t.compile_s:.2f} s, warm {t.run_s:.3f} s "
             f"({e['flows_per_s']:.0f} flows/s), {e['converged']}/{size} converged, "
             f"Newton iterations {e['steps_mean']:.2f} mean / {e['steps_max']} max, "
             f"{e['fraction_of_f64']:.1%} of float64 rate")
        if best is None or t.run_s < best[0]["run_s"]:
            best = (e, res)
    info["by_chunk"] = by_chunk
    e_best, res = best
    info["best_chunk"] = e_best["chunk"]

    # --- the work–precision point: every member against the Theorem-1 minimizer -------------
    s_all, a_all = np.meshgrid(shapes, scales, indexing="ij")
    w_min, method = reference.minimizers(X, y, a_all.ravel(), s_all.ravel())
    dist = rel_dist(res["w"], w_min)
    info["precision"] = dict(method=method, max=float(np.max(dist)),
                             median=float(np.median(dist)))
    _say(f"distance to argmin Q ({method}): max {np.max(dist):.2e}, median {np.median(dist):.2e}")

    # --- the same members on the CPU ----------------------------------------------------------
    sub = np.ix_(np.arange(0, len(shapes), 10), np.arange(0, len(scales), 10))
    w_dev = res["w"].reshape(len(shapes), len(scales), -1)[sub].reshape(-1, d)
    _, res_cpu = run_sweep(X, y, shapes[::10], scales[::10], chunk_size=8,
                           devices=jax.devices("cpu"), runs=0)
    info["vs_host_cpu"] = float(np.max(rel_dist(w_dev, res_cpu["w"])))
    info["cpu_members"] = int(w_dev.shape[0])
    _say(f"device vs this host's CPU ({w_dev.shape[0]} members): max rel. "
         f"{info['vs_host_cpu']:.2e}")
    if cpu_reference:
        ref = np.load(cpu_reference)
        # np.linspace/np.logspace may differ in the last bit between numpy versions.
        if not (np.allclose(ref["shapes"], shapes[::10], rtol=1e-14, atol=0)
                and np.allclose(ref["scales"], scales[::10], rtol=1e-14, atol=0)):
            raise ValueError(f"--cpu-reference {cpu_reference}: a different sub-grid")
        info["vs_reference_cpu"] = dict(max=float(np.max(rel_dist(w_dev, ref["w"]))),
                                        jax=str(ref["jax"]), machine=str(ref["machine"]))
        _say(f"device vs {cpu_reference} (jax {ref['jax']}): max rel. "
             f"{info['vs_reference_cpu']['max']:.2e}")
    info["total_s"] = time.perf_counter() - t_start
    _write(info, Path(out_dir))
    return info


def profile(small: bool, batch: int | None = None) -> dict:
    """Where a chunk's time goes (``--profile``): the batched pieces of one Newton iteration at
    `batch` members (median of 20 calls each), one ``while_loop`` iteration, one sweep chunk of
    `batch` members, and five calls of the whole grid with the default chunk in this process."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    B = batch or (64 if small else 2048)
    Xn, yn, shapes, scales = problem(small)
    X, y = jnp.asarray(Xn), jnp.asarray(yn)
    n = X.shape[0]
    key = jax.random.key(0)
    c = jnp.exp(0.1 * jax.random.normal(key, (B, X.shape[1])))
    nu = 1e-3 * jax.random.normal(key, (B, n))

    def med(f, *a, reps=20):  # median of `reps` warm calls (time_jax compiles first)
        return time_jax(lambda: f(*a), runs=reps).run_s

    jac = jax.jit(lambda c: jnp.einsum("nd,bd,md->bnm", X, c, X))
    chol = jax.jit(lambda M: jsl.cho_factor(M, lower=True)[0])
    M = jac(c) + 1e-3 * jnp.eye(n)
    L = chol(M)
    solve = jax.jit(lambda L, r: jsl.cho_solve((L, True), r[..., None])[..., 0])
    field = jax.jit(lambda nu: (jnp.exp(nu @ X) - jnp.exp(-(nu @ X))) @ X.T - y)
    loop = jax.jit(lambda a: jax.lax.while_loop(lambda s: s[0] < 100,
                                                lambda s: (s[0] + 1, s[1] * 0.999), (0, a))[1])
    out = dict(B=B, jacobian_ms=1e3 * med(jac, c), cholesky_ms=1e3 * med(chol, M),
               cho_solve_ms=1e3 * med(solve, L, nu), field_ms=1e3 * med(field, nu),
               empty_jit_ms=1e3 * med(jax.jit(lambda a: a + 1), nu),
               while_iteration_us=1e6 * med(loop, nu) / 100)
    sub_shapes = np.linspace(*SHAPES, 8 if small else 32)
    sub_scales = np.logspace(*SCALES, B // len(sub_shapes))
    out["sweep_chunk_s"] = med(lambda: run_sweep(Xn, yn, sub_shapes, sub_scales, chunk_size=B,
                                                 devices=jax.devices()[:1], runs=0)[1], reps=3)
    calls = []
    for _ in range(5):
        t = time.perf_counter()
        run_sweep(Xn, yn, shapes, scales, chunk_size=None, devices=jax.devices()[:1], runs=0)
        calls.append(time.perf_counter() - t)
    out["full_grid_default_calls_s"] = calls
    return out


def markdown(info: dict) -> str:
    v = ", ".join(f"{k} {x}" for k, x in info["versions"].items())
    lines = [f"**Device:** {info['device']} ({info['platform']}), {info['date']}; {v}.", "",
             f"Grid: {info['configs']} configurations (shape × scale), d = {info['d']}, "
             f"n = {info['n']}, `ibflow.sweep` with default options. Measured float64 matmul "
             f"{info['matmul_f64_square']['size']}³: "
             f"{info['matmul_f64_square']['flops_per_s'] / 1e12:.3g} TFLOP/s.", "",
             "| chunk size | compile [s] | warm call [s] | flows/s | converged "
             "| Newton iterations (mean / max) | useful GFLOP/s | fraction of float64 rate |",
             "|---|---|---|---|---|---|---|---|"]
    for e in info["by_chunk"]:
        lines.append(f"| {e['chunk']} | {e['compile_s']:.2f} | {e['run_s']:.3f} | "
                     f"{e['flows_per_s']:.0f} | {e['converged']}/{info['configs']} | "
                     f"{e['steps_mean']:.2f} / {e['steps_max']} | "
                     f"{e['useful_rate'] / 1e9:.1f} | {e['fraction_of_f64']:.1%} |")
    p = info["precision"]
    lines += ["", f"Best chunk size: {info['best_chunk']}. Distance of every limit to argmin Q "
              f"({p['method']}): max {p['max']:.2e}, median {p['median']:.2e}. "
              f"Against the host CPU ({info['cpu_members']} members: every tenth shape and "
              f"scale; same process): max "
              f"{info['vs_host_cpu']:.2e}."]
    if "vs_reference_cpu" in info:
        r = info["vs_reference_cpu"]
        lines[-1] += (f" Against limits computed on {r['machine']} with jax {r['jax']}: "
                      f"max {r['max']:.2e}.")
    return "\n".join(lines) + "\n"


def _write(info: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(info, indent=1, default=float))
    (out / "gpu.md").write_text(markdown(info))
    rows = info["by_chunk"]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    c = [e["chunk"] for e in rows]
    ax[0].plot(c, [e["flows_per_s"] for e in rows], "o-")
    ax[0].set(xscale="log", xlabel="chunk size", ylabel="flows / s (warm)",
              title=f"{info['configs']} flows, d = {info['d']}")
    ax[1].plot(c, [e["compile_s"] for e in rows], "s-", label="compile")
    ax[1].plot(c, [e["run_s"] for e in rows], "o-", label="warm call")
    ax[1].set(xscale="log", xlabel="chunk size", ylabel="seconds", title=info["device"])
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "gpu.png", dpi=120)
    plt.close(fig)
    _say(f"wrote {out}/gpu.md, gpu.json, gpu.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="d = 60, n = 12, 20 × 20 grid")
    ap.add_argument("--chunks", default=None,
                    help="comma-separated chunk sizes (default: CHUNKS; small: 16,400)")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="start no further chunk size after this many seconds")
    ap.add_argument("--cpu-reference", default=None, help="a --write-cpu-reference file")
    ap.add_argument("--write-cpu-reference", default=None, metavar="FILE",
                    help="only write the CPU limits of the 10 × 10 sub-grid to FILE (.npz)")
    ap.add_argument("--first-call", type=int, default=None, metavar="CHUNK",
                    help="only time this process's first and second sweep call at CHUNK (0: the "
                         "sweep's default; run it twice with one IBFLOW_CACHE_DIR to see the "
                         "persistent cache work)")
    ap.add_argument("--calls", type=int, default=1,
                    help="with --first-call: warm calls after the first (default 1)")
    ap.add_argument("--out", default="benchmarks/results", help="output directory")
    ap.add_argument("--profile", action="store_true",
                    help="only print where a chunk's time goes (see `profile`), one JSON line")
    args = ap.parse_args(argv)
    if args.profile:
        print(json.dumps(profile(args.small)), flush=True)
        return 0
    if args.calls < 1:
        ap.error(f"--calls must be >= 1; got {args.calls}")
    if args.first_call is not None:
        X, y, shapes, scales = problem(args.small)
        t0 = time.perf_counter()
        t, res = run_sweep(X, y, shapes, scales, chunk_size=args.first_call or None,
                           devices=jax.devices()[:1], runs=args.calls)
        first = time.perf_counter() - t0 - sum(t.all_s)
        print(json.dumps(dict(chunk=args.first_call, first_call_s=first, compile_s=t.compile_s,
                              warm_s=t.run_s, warm_calls_s=t.all_s, ratio=first / t.run_s,
                              converged=int((res["status"] == 0).sum()))), flush=True)
        return 0
    if args.write_cpu_reference:
        write_cpu_reference(args.write_cpu_reference, args.small)
        return 0
    default = "16,400" if args.small else ",".join(map(str, CHUNKS))
    try:
        chunks = [int(c) for c in (args.chunks or default).split(",")]
    except ValueError:
        ap.error(f"--chunks must be comma-separated integers; got {args.chunks!r}")
    if any(c < 1 for c in chunks):
        ap.error(f"--chunks must be ≥ 1; got {args.chunks!r}")
    if args.cpu_reference and not Path(args.cpu_reference).is_file():
        ap.error(f"--cpu-reference: no such file {args.cpu_reference!r}")
    info = run(small=args.small, chunks=chunks, budget_s=args.budget_s,
               cpu_reference=args.cpu_reference, out_dir=args.out)
    print(markdown(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
