"""The ``ibflow`` command line: ``ibflow flow ...`` runs one integration, ``ibflow reproduce NAME``
reproduces a published figure (``ibflow reproduce --list`` lists them).

Exit codes (README, "Guarantees"):

- 0: success (the flow converged; the reproduction finished);
- 1: runtime failure (an unexpected error while computing);
- 2: usage error (bad option or value, inconsistent problem sizes): one line on stderr, no
  traceback, nothing computed;
- 3: the flow ran but did not converge (its status says why), or its result is not trustworthy
  (the predictor is rounding noise at this scale: ``trustworthy: false``); the result is still
  printed.

Reference computations (the min-ℓ1/ℓ2 interpolants, the theory's minimizer) fail soft: when one
cannot be computed the flow result is still printed, with that reference's error as a string.

``--json`` prints strict JSON (RFC 8259): a non-finite number is written as the string
``"inf"``, ``"-inf"`` or ``"nan"`` (``float()`` reads each back), never as the invalid bare
``Infinity``/``NaN``. ``"time": "inf"`` is a limit reached at t = ∞ (a Newton tail).

``--help``, ``--version`` and usage errors are answered before JAX is imported (this module and
``ibflow/__init__`` import nothing heavy): JAX and the models load only to compute.
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from ._version import __version__

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_CONVERGED = 0, 1, 2, 3


class UsageError(Exception):
    """A user error found before computing: exit 2 with a one-line message."""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help unless the help states its default itself
    (options whose default is computed) or the option is a flag that is off by default."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (exit 2) instead of the usage block, and every
    option's default in --help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: Largest seed `jax.random.key` accepts (a signed 64-bit integer).
MAX_SEED = 2**63 - 1


# --- argument types: bad values are usage errors (exit 2) -----------------------------------
def _int_at_least(low: int, high: int | None = None):
    wanted = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}; got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {wanted}; got {value}")
        return value

    parse.__name__ = wanted
    return parse


def _output_options(p, record: str):
    """``--progress`` and ``--json`` (printing `record` as strict JSON) of a computing command."""
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (with the current loss and steps); default: "
                        "on when stderr is a terminal, off when it is piped or redirected")
    p.add_argument("--json", action="store_true",
                   help=f"print {record} as one strict-JSON object (non-finite numbers as the "
                        "strings \"inf\", \"-inf\", \"nan\") and nothing else on stdout")


def _float_where(test, description: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"must be {description}; got {text}")
        return value

    parse.__name__ = description
    return parse


_positive = _float_where(lambda v: v > 0, "a finite number > 0")
_nonnegative = _float_where(lambda v: v >= 0, "a finite number >= 0")
_open_unit = _float_where(lambda v: -1 < v < 1, "a number in the open interval (-1, 1)")
_slope = _float_where(lambda v: 0 < v <= 1, "a number in (0, 1]")


def _flow_parser(sub):
    p = sub.add_parser(
        "flow", help="integrate one flow to its limit on a sparse-regression problem",
        formatter_class=_Formatter,
        description="Integrate gradient flow from one initialization to its limit point on the "
        "sparse-regression problem of docs/theory §2.8 and report how it ended and where it "
        "landed: a short summary by default, the full record with --json. Exit code 0: "
        "converged, 1: runtime failure, 2: usage error, 3: the flow did not converge.")
    p.add_argument("--model", choices=["diagonal", "fc", "leaky"], default="diagonal",
                   help="diagonal linear net, fully connected linear net, or leaky-ReLU neuron")
    p.add_argument("--scale", type=_positive, default=1e-3, help="initialization scale α > 0")
    p.add_argument("--shape", type=_open_unit, default=0.0,
                   help="initialization shape s in (-1, 1)")
    p.add_argument("--width", type=_int_at_least(1), default=1, help="hidden units (fc only)")
    p.add_argument("--slope", type=_slope, default=0.2,
                   help="leaky slope γ in (0, 1] (leaky only)")
    p.add_argument("--n", type=_int_at_least(1), default=100, help="training examples")
    p.add_argument("--d", type=_int_at_least(1), default=1000, help="input dimension")
    p.add_argument("--k", type=_int_at_least(1), default=5, help="teacher sparsity (<= d)")
    p.add_argument("--noise", type=_nonnegative, default=0.1,
                   help="label-noise standard deviation")
    p.add_argument("--seed", type=_int_at_least(0, MAX_SEED), default=0,
                   help="data and initialization seed")
    p.add_argument("--target-loss", type=_positive, default=None,
                   help="stop when the loss is below (default: 1e-24 × mean(y²)/2)")
    p.add_argument("--rtol", type=_positive, default=None,
                   help="solver relative tolerance of the path (default: integrate's own)")
    p.add_argument("--max-steps", type=_int_at_least(1), default=100_000,
                   help="solver step budget")
    p.add_argument("--method", choices=["auto", "parameters"], default="auto",
                   help="auto: the model's closed-form reduction where it has one; "
                        "parameters: the ODE in parameter space")
    _output_options(p, "the full record")
    p.set_defaults(run=_run_flow)


def _check_flow(args) -> None:
    """Checks across options, before anything is imported or computed."""
    if args.k > args.d:
        raise UsageError(f"--k {args.k} exceeds --d {args.d} (the teacher's sparsity must be "
                         "at most the dimension)")
    if args.width > 1 and args.model != "fc":
        raise UsageError("--width applies to --model fc only")


def _build_problem(args):
    """Data and model from the arguments; every ValueError here is a usage error."""
    import jax
    import numpy as np

    import ibflow

    from ._activations.relu import leaky_relu

    key_data, key_init = jax.random.split(jax.random.key(args.seed))
    data = ibflow.data.sparse_regression(key_data, n=args.n, d=args.d, k=args.k,
                                         noise=args.noise)
    y = data.y
    # The default target and the status are relative to mean(y²)/2: labels whose square
    # overflows float64 leave nothing to converge to (and would be blamed on target_loss).
    with np.errstate(over="ignore"):
        mean_square = 0.5 * np.mean(np.square(np.asarray(y)))
    if not np.isfinite(mean_square):
        raise UsageError(f"--noise {args.noise:g} makes the labels' mean square overflow "
                         "float64 (label noise of that size leaves no finite loss); use a "
                         "smaller --noise")
    if args.model == "diagonal":
        model = ibflow.DiagonalNet.from_scale_shape(args.scale, args.shape, dim=args.d)
    elif args.model == "fc":
        model = ibflow.FullyConnectedNet.from_scale_shape(
            args.scale, args.shape, dim=args.d, width=args.width, key=key_init)
    else:
        model = ibflow.LeakyReLUNeuron.from_scale_shape(
            args.scale, args.shape, dim=args.d, slope=args.slope, key=key_init)
        sign = float(np.sign(model.a))  # realizable targets for this sign ([§2.5][theory-2-5])
        y = sign * leaky_relu(sign * (data.X @ data.w_star), args.slope)
    return data, model, y


def _final_sign(model):
    """The `final_sign` the trained ``model`` gives `ibflow.implicit_bias` (None where the
    regularizer does not depend on it or the model has none)."""
    import ibflow

    return (model.implicit_bias_sign() if isinstance(model, ibflow.AbstractImplicitBiasModel)
            else None)


def _references(args, data, y, model, sol) -> tuple[dict, dict]:
    """Distances of the flow's predictor to the reference solutions; each reference fails soft
    (its error message is recorded instead)."""
    import numpy as np

    import ibflow

    w = np.asarray(sol.predictor)
    distances, errors = {}, {}

    def rel(ref):
        ref = np.asarray(ref)
        return float(np.linalg.norm(w - ref) / max(np.linalg.norm(ref), np.finfo(float).tiny))

    def theory():
        Q = ibflow.implicit_bias(model, final_sign=_final_sign(sol.model))
        m = ibflow.minimize_regularizer(Q, data.X, y, throw=False)
        if not bool(m.converged):
            raise RuntimeError("the theory's minimizer did not converge: "
                               f"{ibflow.Status[m.status]}")
        return m.w

    with np.errstate(over="ignore", invalid="ignore"):  # non-finite results are reported
        for name, compute in (("min_l1", lambda: ibflow.min_l1_interpolant(data.X, y)),
                              ("min_l2", lambda: ibflow.min_l2_interpolant(data.X, y)),
                              ("theory", theory)):
            try:
                distances[name] = rel(compute())
            # A reference failing must not lose the flow result.
            except Exception as e:  # noqa: BLE001
                distances[name] = None
                errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return distances, errors


def _run_flow(args) -> int:
    import jax
    import numpy as np

    import ibflow

    from . import _progress
    from ._checks import square_loss_floor

    try:
        data, model, y = _build_problem(args)
    except (UsageError, ValueError) as e:
        return _usage(args, e)
    formulation = {"auto": ibflow.PreferReduction(),
                   "parameters": ibflow.ParameterSpace()}[args.method]
    start = time.perf_counter()
    try:
        atol = None if args.rtol is None else args.rtol * 1e-4
        sol = ibflow.integrate(model, data.X, y, target_loss=args.target_loss, rtol=args.rtol,
                               atol=atol, max_steps=args.max_steps,
                               formulation=formulation, progress=args.progress,
                               throw=False)
        jax.block_until_ready(sol)
    except ValueError as e:  # option validation, before any computation
        return _usage(args, e)
    finally:
        _progress.close_open_bars()  # before anything else is printed
    elapsed = time.perf_counter() - start
    distances, errors = _references(args, data, y, model, sol)
    # Large cancelling terms (α ≫ 1) can leave the predictor as rounding noise: below this floor
    # no loss computed from it certifies anything, whatever the status says.
    floor = float(square_loss_floor(sol.model, data.X))
    trustworthy = floor <= float(sol.target_loss) and bool(np.isfinite(floor))
    test_error = None
    if args.model != "leaky":
        test_error = float(data.test_error(np.asarray(sol.predictor)))
    report = {
        "model": args.model, "scale": args.scale, "shape": args.shape, "n": args.n, "d": args.d,
        "status": ibflow.Status[sol.status],
        "status_name": _status_name(sol.status), "converged": bool(sol.converged),
        "final_loss": float(sol.loss), "target_loss": float(sol.target_loss),
        "steps": int(sol.steps), "time": float(sol.time), "wall_seconds": elapsed,
        "rel_distance_to_min_l1": distances["min_l1"],
        "rel_distance_to_min_l2": distances["min_l2"],
        "rel_distance_to_theory": distances["theory"],
        "test_error": test_error, "reference_errors": errors,
        "roundoff_loss_floor": floor, "trustworthy": trustworthy,
    }
    if sol.kinks is not None:
        report |= {"switches": int(sol.kinks.switches), "slides": int(sol.kinks.slides),
                   "sliding_time": float(sol.kinks.sliding_time)}
    if args.json:
        print(_json(report))
    else:
        print(_summary(report))
    return EXIT_OK if report["converged"] and trustworthy else EXIT_NOT_CONVERGED


def _strict(value):
    """`value` with every non-finite float replaced by "inf", "-inf" or "nan" (strict JSON)."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return value


def _json(record) -> str:
    """Strict JSON (no bare Infinity/NaN: `allow_nan=False` fails on any left over)."""
    return json.dumps(_strict(json.loads(json.dumps(record, default=_plain))), indent=2,
                      allow_nan=False)


def _plain(value):
    """numpy scalars and arrays (reproduction summaries) as Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return float(value)


def _status_name(status) -> str:
    from ._status import STATUS_NAMES

    return STATUS_NAMES[int(status._value)]


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def _summary(r: dict) -> str:
    """A few aligned lines for a person; ``--json`` gives the full record."""
    rows = [
        ("problem", f"{r['model']} net, α = {r['scale']:g}, s = {r['shape']:g}, n = {r['n']}, "
                    f"d = {r['d']}"),
        ("status", f"{r['status_name']}: {r['status']}"),
        ("loss", f"{r['final_loss']:.3e} (target {r['target_loss']:.3e})"),
        ("steps", f"{r['steps']}"),
        # A Newton tail jumps to the limit: reached at t = ∞.
        ("time", ("t = ∞: the limit, by Newton on the equilibrium equation"
                  if r["time"] == math.inf else f"t = {r['time']:.3e}")
         + f" (wall {r['wall_seconds']:.2f} s)"),
        ("distance", f"to min-ℓ1 {_fmt(r['rel_distance_to_min_l1'])}   "
                     f"to min-ℓ2 {_fmt(r['rel_distance_to_min_l2'])}   "
                     f"to theory {_fmt(r['rel_distance_to_theory'])}   (relative)"),
    ]
    if "switches" in r:
        rows.append(("kinks", f"{r['switches']} switching events, {r['slides']} slides, "
                              f"t = {r['sliding_time']:.3e} sliding"))
    if r["test_error"] is not None:
        rows.append(("test error", _fmt(r["test_error"])))
    rows += [(f"{name} error", msg) for name, msg in r["reference_errors"].items()]
    if not r["trustworthy"]:
        rows.append(("warning", f"not trustworthy: the predictor's rounding noise alone gives a "
                                f"loss of {r['roundoff_loss_floor']:.1e} > target "
                                f"{r['target_loss']:.1e} (cancelling terms at this scale)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _usage(args, error) -> int:
    print(f"ibflow {args.command}: error: {str(error).splitlines()[0]}", file=sys.stderr)
    return EXIT_USAGE


def _reproduce_parser(sub):
    p = sub.add_parser("reproduce", help="reproduce a published figure (--list to see them)",
                       description="Write a figure (PNG) and the data behind it.",
                       formatter_class=_Formatter)
    p.add_argument("name", nargs="?", help="which reproduction (see --list)")
    p.add_argument("--list", action="store_true",
                   help="list the reproductions with the default run's time")
    p.add_argument("--full", action="store_true", help="the paper's settings (slower)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory: the files are written directly in it (default: "
                   "./ibflow-results/NAME)")
    _output_options(p, "the summary")
    p.set_defaults(run=_run_reproduce)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"~{seconds:.0f} s" if seconds < 90 else f"~{seconds / 60:.0f} min"


def _run_reproduce(args) -> int:
    from ._reproduce import REPRODUCTIONS
    from ._reproduce.registry import output_dir

    if args.list:
        print(f"{'name':<16} {'default run':>11}  what (times: 2-core CPU, first run, "
              "compilation included)")
        for r in REPRODUCTIONS.values():
            print(f"{r.name:<16} {_duration(r.seconds):>11}  {r.help}")
        return EXIT_OK
    if not args.name:
        return _usage(args, UsageError("name a reproduction (ibflow reproduce --list lists "
                                       "them)"))
    if args.name not in REPRODUCTIONS:
        return _usage(args, UsageError(f"unknown reproduction {args.name!r}; choose from: "
                                       f"{', '.join(REPRODUCTIONS)}"))
    out = output_dir(args.name, args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return _usage(args, UsageError(f"--out {out}: cannot create the directory ({e})"))
    start = time.perf_counter()
    summary = REPRODUCTIONS[args.name].run(out, args.full, args.progress)
    summary = {"reproduction": args.name, "full": args.full, "output": str(out),
               "wall_seconds": round(time.perf_counter() - start, 2), **summary}
    text = _json(summary)
    (out / "summary.json").write_text(text)
    if args.json:
        print(text)
    else:
        print(f"{args.name}: wrote {out} (summary.json, figure and data) in "
              f"{summary['wall_seconds']:.1f} s")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 failure, 2 usage, 3 not
    converged)."""
    parser = _Parser(
        prog="ibflow", description="Exact implicit-bias flows: integrate training dynamics to "
        "their limit points and compare them with the theory's regularizers. Exit codes: 0 "
        "success, 1 runtime failure, 2 usage error, 3 the flow did not converge.")
    parser.add_argument("--version", action="version", version=f"ibflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _flow_parser(sub)
    _reproduce_parser(sub)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version (0) and usage errors (2)
        return int(e.code or 0)
    if args.progress is None:  # bars only where a person watches them
        args.progress = _is_terminal(sys.stderr)
    try:
        if args.command == "flow":
            _check_flow(args)
    except UsageError as e:
        return _usage(args, e)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"ibflow {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  a runtime failure: one line, exit 1
        if os.environ.get("IBFLOW_TRACEBACK"):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"ibflow {args.command}: failed: {type(e).__name__}: {first} (set "
              "IBFLOW_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
