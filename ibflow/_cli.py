"""The ``ibflow`` command line: ``ibflow flow ...`` runs one integration, ``ibflow reproduce NAME``
reproduces a published figure (``ibflow reproduce --list`` lists them)."""

import argparse
import json
import sys
import time
from pathlib import Path


def _flow_parser(sub):
    p = sub.add_parser(
        "flow", help="integrate one flow to its limit on a sparse-regression problem",
        description="Integrate gradient flow from one initialization to its limit point on the "
        "sparse-regression problem of THEORY §2.8 and report how it ended and where it landed.")
    p.add_argument("--model", choices=["diagonal", "fc", "leaky"], default="diagonal",
                   help="diagonal linear net, fully connected linear net, or leaky-ReLU neuron")
    p.add_argument("--scale", type=float, default=1e-3, help="initialization scale α > 0")
    p.add_argument("--shape", type=float, default=0.0, help="initialization shape s in (-1, 1)")
    p.add_argument("--width", type=int, default=1, help="hidden units (fc only)")
    p.add_argument("--slope", type=float, default=0.2, help="leaky slope γ in (0, 1] (leaky only)")
    p.add_argument("--n", type=int, default=100, help="training examples")
    p.add_argument("--d", type=int, default=1000, help="input dimension")
    p.add_argument("--k", type=int, default=5, help="teacher sparsity")
    p.add_argument("--noise", type=float, default=0.1, help="label-noise standard deviation")
    p.add_argument("--seed", type=int, default=0, help="data and initialization seed")
    p.add_argument("--target-loss", type=float, default=None, help="stop when the loss is below")
    p.add_argument("--rtol", type=float, default=1e-10, help="solver relative tolerance")
    p.add_argument("--max-steps", type=int, default=100_000, help="solver step budget")
    p.add_argument("--method", choices=["auto", "parameters", "reduced"], default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(run=_run_flow)


def _run_flow(args) -> int:
    import jax
    import numpy as np

    import ibflow

    key_data, key_init = jax.random.split(jax.random.key(args.seed))
    data = ibflow.data.sparse_regression(key_data, n=args.n, d=args.d, k=args.k, noise=args.noise)
    y = data.y
    if args.model == "diagonal":
        model = ibflow.DiagonalNet.from_scale_shape(args.scale, args.shape, dim=args.d)
    elif args.model == "fc":
        model = ibflow.FullyConnectedNet.from_scale_shape(
            args.scale, args.shape, dim=args.d, width=args.width, key=key_init)
    else:
        model = ibflow.LeakyReLUNeuron.from_scale_shape(
            args.scale, args.shape, dim=args.d, slope=args.slope, key=key_init)
        sign = float(np.sign(model.a))  # realizable targets for this sign (THEORY §2.5)
        y = sign * ibflow._models.leaky_neuron.leaky_relu(sign * (data.X @ data.w_star), args.slope)
    start = time.perf_counter()
    sol = ibflow.integrate(model, data.X, y, target_loss=args.target_loss, rtol=args.rtol,
                           atol=args.rtol * 1e-4, max_steps=args.max_steps, method=args.method,
                           throw=False)
    jax.block_until_ready(sol)
    elapsed = time.perf_counter() - start
    w = np.asarray(sol.predictor)
    l2 = np.asarray(ibflow.min_l2_interpolant(data.X, y))
    l1 = ibflow.min_l1_interpolant(data.X, y)
    report = {
        "model": args.model, "scale": args.scale, "shape": args.shape,
        "status": ibflow.Status[sol.status], "converged": bool(sol.converged),
        "final_loss": float(sol.loss), "target_loss": float(sol.target_loss),
        "steps": int(sol.steps), "time": float(sol.time), "wall_seconds": elapsed,
        "rel_distance_to_min_l1": float(np.linalg.norm(w - l1) / np.linalg.norm(l1)),
        "rel_distance_to_min_l2": float(np.linalg.norm(w - l2) / np.linalg.norm(l2)),
        "test_error": float(data.test_error(sol.predictor)) if args.model != "leaky" else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(map(len, report))
        for k, v in report.items():
            print(f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0 if sol.converged else 1


def _reproduce_parser(sub):
    p = sub.add_parser("reproduce", help="reproduce a published figure (--list to see them)",
                       description="Write a figure (PNG) and the data behind it.")
    p.add_argument("name", nargs="?", help="which reproduction")
    p.add_argument("--list", action="store_true", help="list the reproductions")
    p.add_argument("--full", action="store_true", help="the paper's settings (slower)")
    p.add_argument("--out", type=Path, default=Path("ibflow-results"),
                   help="output directory (default: ./ibflow-results/NAME)")
    p.set_defaults(run=_run_reproduce)


def _run_reproduce(args) -> int:
    from ._reproduce import REPRODUCTIONS

    if args.list or not args.name:
        for r in REPRODUCTIONS.values():
            print(f"{r.name:<18} {r.help}")
        return 0 if args.list else 2
    if args.name not in REPRODUCTIONS:
        print(f"unknown reproduction {args.name!r}; choose from: {', '.join(REPRODUCTIONS)}",
              file=sys.stderr)
        return 2
    out = args.out / args.name
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = REPRODUCTIONS[args.name].run(out, args.full)
    summary = {"reproduction": args.name, "full": args.full, "output": str(out),
               "wall_seconds": round(time.perf_counter() - start, 2), **summary}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    print(json.dumps(summary, indent=2, default=float))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ibflow", description="Exact implicit-bias flows: integrate training dynamics to "
        "their limit points and compare them with the theory's regularizers.")
    sub = parser.add_subparsers(dest="command", required=True)
    _flow_parser(sub)
    _reproduce_parser(sub)
    for extra in _EXTRA_COMMANDS:
        extra(sub)
    args = parser.parse_args(argv)
    return args.run(args)


#: Later subsystems (e.g. sweeps) add their sub-command builders here.
_EXTRA_COMMANDS: list = []

if __name__ == "__main__":
    sys.exit(main())
