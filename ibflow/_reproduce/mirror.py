"""Liang & Montúfar ([THEORY §3][theory-3]): wide shallow univariate networks trained by mirror flow
converge to the solution of a variational problem, with L∞ error ~ n^{-1/2}.

* ``mirror-relu`` (Fig. 1): ReLU nets, unscaled potentials φ₁ = x², φ₂ = |x|³+x², φ₃ = x⁴+x²,
  vs [LM-G][theory-lm-g]; and gradient flow on five copies of the data with labels shifted by
  constants.
* ``mirror-abs`` (Fig. 2): |·| nets, width-scaled potentials, vs [LM-B][theory-lm-b] for each φ; and
  the distribution of |h''| of the three variational solutions.

Data ([THEORY §6][theory-6] item 4 leaves it open): four (mirror-relu) or three (mirror-abs) points
    in
[−1, 1], p_B = Unif(−2, 2),
``a(0) = d(0) = 0``, learning rate ``η₀/n`` with η₀ = 1, ``SquareLoss`` (a mean: only rescales
time). The three potentials × several seeds of one width run as one compiled program that
integrates its members one after the other (``lax.map``), each with its own steps. (A ``vmap``
of them compiles once too, but on the CPU a batched Tsit5 step of these small-data flows costs
more than its members' steps alone: 6 width-1024 flows took 394 µs per batched step where one
alone takes 51 µs, benchmarks/results/vmapped_steps.md; and a batch runs for its slowest
member.) The widths' programs compile on two threads while later widths are traced
(`width_study`). Widths are integrated with the explicit solver only (the
state has 3n+1 entries) to ``L ≤ 1e-12 · mean(y²)/2``; members that do not converge are
excluded from the fits and counted in ``converged_fraction``.

Small widths: the hidden layer moves by O(1/n) here, and at small widths a kink ``b_k/w_k``
reaches a data point and slides along it (a Filippov sliding mode of the exact flow), which
`integrate` follows through its kinks ([THEORY §8.2][theory-8-2]). ``mirror-relu`` therefore starts
at width 16 (`RELU_SMALL_WIDTHS`; the slope is fitted from width 64 on, the lazy regime the theory
is about);
``mirror-abs`` starts at 64. From width 64 on the flows are integrated as smooth
(`SMOOTH_FROM_WIDTH`). The stiffness of the flow is ``cond(kernel) · max φ''/φ''(0)``, which
is why the data are few, well-spread points.
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

from .._progress import line, lines

X_DATA = np.array([-0.8, -0.3, 0.2, 0.7])
Y_DATA = np.array([0.2, -0.1, 0.1, 0.3])
#: mirror-abs uses three points: the scaled quartic potential multiplies the stiffness of the
#: flow by max φ''(nΔa)/φ''(0) ≈ 36 here, and the 4-point kernel is 8× worse conditioned.
ABS_X = np.array([-0.7, 0.0, 0.7])
ABS_Y = np.array([0.1, -0.1, 0.2])
BIAS = ibflow.UniformBias(2.0)
EVAL_GRID = np.linspace(-1.2, 1.2, 481)
#: (c₂, c₃, c₄) of φ₁ = x², φ₂ = |x|³ + x², φ₃ = x⁴ + x²
POTENTIALS = {"x^2": (1.0, 0.0, 0.0), "|x|^3+x^2": (1.0, 1.0, 0.0), "x^4+x^2": (1.0, 0.0, 1.0)}
SHIFTS = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
RELATIVE_TARGET = 1e-12
#: Widths below the shared grid that ``mirror-relu`` adds: kinks slide there.
RELU_SMALL_WIDTHS = [16, 32]
#: Widths from which the flows are integrated as smooth (``ParameterSpace(kinks=False)``): in
#: the lazy regime no kink reaches a data point (a width-256 flow makes no switch), and the
#: kink path's segment loop, which evaluates the multiplier system at every step, costs many
#: times the smooth solve.
SMOOTH_FROM_WIDTH = 64
#: Widths compiled at once (`width_study`): the project's CPU has two cores.
COMPILE_THREADS = 2
SOLVE = dict(rtol=1e-8, atol=1e-12, stiff_solver=None, max_steps=100_000, throw=False)


def _formulation(width: int) -> ibflow.ParameterSpace:
    return ibflow.ParameterSpace(kinks=width < SMOOTH_FROM_WIDTH)


def on_grid(sol) -> tuple:
    """A solved net's outputs on `EVAL_GRID` and whether its flow converged."""
    return jax.vmap(sol.model)(jnp.asarray(EVAL_GRID)), sol.status == ibflow.Status.converged


def settings(full: bool) -> dict:
    """Widths and seeds: default ≤ ~2 min, `full` larger."""
    if full:
        return dict(widths=[64, 128, 256, 512, 1024, 2048, 4096, 8192], seeds=4, gd_width=4096)
    return dict(widths=[64, 128, 256, 512, 1024, 2048], seeds=2, gd_width=1024)


def _target(y):
    return RELATIVE_TARGET * 0.5 * float(np.mean(np.asarray(y) ** 2))


def nets(width: int, activation: str, keys):
    """`ShallowNet.init` for each key, stacked: one compiled program (eager vmapped ops compile
    one small program each: ten of them took 0.9 s per width)."""
    return eqx.filter_jit(eqx.filter_vmap(lambda k: ibflow.ShallowNet.init(
        width, activation=activation, bias=BIAS, key=k)))(keys)


def member_solve(width: int, *, scaled: bool, data, formulation=None):
    """``solve(c, net)``: the mirror flow of `net` on `data` with the potential of coefficients
    `c` (c₂, c₃, c₄), learning rate 1/width, to the reproduction's target; a `Solution`.
    `formulation`: default `_formulation(width)`."""
    scaling = ibflow.WidthScaled(float(width)) if scaled else ibflow.Unscaled()
    X, y = jnp.asarray(data[0])[:, None], jnp.asarray(data[1])
    formulation = _formulation(width) if formulation is None else formulation

    def solve(c, net):
        flow = ibflow.MirrorFlow(ibflow.PolynomialPotential(c[0], c[1], c[2]), scaling=scaling,
                                 learning_rate=1.0 / width)
        return ibflow.integrate(net, X, y, flow=flow, target_loss=_target(data[1]),
                                formulation=formulation, **SOLVE)

    return solve


def lower_width(width: int, *, activation: str, scaled: bool, seeds: int, data, key=None):
    """Mirror flow for the three potentials × `seeds` initializations at one width, the members
    integrated one after the other (module docstring), traced and lowered, not compiled:
    ``(lowered, args)``. ``lowered.compile()(*args)`` returns ``(outputs on EVAL_GRID
    (potentials, seeds, G), converged (potentials, seeds), max_k |Δθ| (potentials, seeds))``."""
    key = jax.random.key(width) if key is None else key
    arrays, static = eqx.partition(nets(width, activation, jax.random.split(key, seeds)),
                                   eqx.is_array)
    solve = member_solve(width, scaled=scaled, data=data)

    def one(c, net):
        sol = solve(c, net)
        moved = jnp.max(jnp.abs(jnp.concatenate([sol.model.a - net.a, sol.model.b - net.b,
                                                 sol.model.w - net.w])))
        return *on_grid(sol), moved

    # Member p·seeds + s: potential p, net s.
    potentials = len(POTENTIALS)
    cs = np.repeat(np.array(list(POTENTIALS.values())), seeds, axis=0)

    def program(cs, arrays):
        tiled = jax.tree_util.tree_map(
            lambda a: jnp.tile(a, (potentials,) + (1,) * (a.ndim - 1)), arrays)
        out = jax.lax.map(lambda m: one(m[0], eqx.combine(m[1], static)), (cs, tiled))
        return jax.tree_util.tree_map(
            lambda a: a.reshape((potentials, seeds) + a.shape[1:]), out)

    return jax.jit(program).lower(cs, arrays), (cs, arrays)


def _lower_shifted(width: int, ys):
    """Gradient flow of one ReLU net (key 1234) on each label set of `ys`, one after the other
    (module docstring), traced and lowered: ``(lowered, args)``; the program returns the nets'
    outputs on EVAL_GRID and whether each converged."""
    arrays, static = eqx.partition(nets(width, "relu", jax.random.key(1234)[None]),
                                   eqx.is_array)
    X = X_DATA[:, None]

    def program(arrays, ys):
        net = eqx.combine(jax.tree_util.tree_map(lambda a: a[0], arrays), static)

        def one(yy):
            sol = ibflow.integrate(net, X, yy, flow=ibflow.GradientFlow(),
                                   target_loss=_target(Y_DATA), formulation=_formulation(width),
                                   **SOLVE)
            return on_grid(sol)

        return jax.lax.map(one, ys)

    return jax.jit(program).lower(arrays, ys), (arrays, ys)


def fit_slope(widths, errors):
    slope, intercept = np.polyfit(np.log(widths), np.log(errors), 1)
    return float(slope), float(intercept)


def width_study(*, activation: str, scaled: bool, widths, seeds, references, data, say=line):
    """L∞ errors ``(W, potentials, seeds)`` against `references` (potentials, G), NaN where a run
    did not converge, plus the L∞ distance between the trained nets of different potentials.
    `say`: where the progress lines go (one per width)."""
    errors = np.full((len(widths), len(POTENTIALS), seeds), np.nan)
    between = np.zeros(len(widths))
    converged = np.zeros((len(widths), len(POTENTIALS), seeds), dtype=bool)
    moved = np.zeros(len(widths))
    # Each width's program is compiled on one of `COMPILE_THREADS` threads (XLA's compiler runs
    # outside Python's lock) as soon as it is traced, while later widths are traced and earlier
    # ones run.
    start = time.perf_counter()
    with ThreadPoolExecutor(COMPILE_THREADS) as pool:
        programs, compiled = [], []
        for n in widths:
            programs.append(lower_width(n, activation=activation, scaled=scaled, seeds=seeds,
                                        data=data, key=jax.random.key(n)))
            compiled.append(pool.submit(programs[-1][0].compile))
        say(f"  traced {len(widths)} widths, {time.perf_counter() - start:.1f} s")
        for i, n in enumerate(widths):
            start = time.perf_counter()
            out, ok, mv = (np.asarray(a) for a in compiled[i].result()(*programs[i][1]))
            # Progress, as each width ends (the wait for its compile, then its flows).
            say(f"  width {n}: {int(ok.sum())} of {ok.size} flows converged, "
                 f"{time.perf_counter() - start:.1f} s")
            if i == len(widths) - 1:
                last = out
            err = np.max(np.abs(out - references[:, None, :]), axis=-1)
            errors[i] = np.where(ok, err, np.nan)
            converged[i] = ok
            between[i] = np.max(np.abs(out[:, None] - out[None, :]))
            moved[i] = np.max(mv)
    return errors, converged, between, moved, last


def _plot(path: Path, panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, draw in zip(axes, panels):
        draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _error_panel(widths, errors, slope, title):
    def draw(ax):
        mean = np.nanmean(errors, axis=2)
        for j, name in enumerate(POTENTIALS):
            ax.loglog(widths, mean[:, j], "o-", label=f"φ = {name}")
        fit = np.exp(slope[1]) * np.asarray(widths, dtype=float) ** slope[0]
        ax.loglog(widths, fit, "k--", label=f"fit: slope {slope[0]:.2f}")
        ax.set_xlabel("width n")
        ax.set_ylabel("L∞ error to the variational solution")
        ax.set_title(title)
        ax.legend(fontsize=8)

    return draw


def run_relu(out: Path, full: bool, progress: bool = False) -> dict:
    say = lines(progress)
    cfg = settings(full)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    g = ibflow.relu_variational(X_DATA, Y_DATA, bias=BIAS)
    ref = np.asarray(g(jnp.asarray(EVAL_GRID)))
    refs = np.stack([ref] * len(POTENTIALS))  # unscaled: one limit for every φ
    # ([LM-T1][theory-lm-t1])
    widths = RELU_SMALL_WIDTHS + cfg["widths"]
    # Gradient flow on five copies of the data with shifted labels (Fig. 1 right), traced
    # first and compiled while the widths run.
    n = cfg["gd_width"]
    ys = Y_DATA[None, :] + SHIFTS[:, None]
    shifted, shifted_args = _lower_shifted(n, ys)
    with ThreadPoolExecutor(1) as pool:
        shifted = pool.submit(shifted.compile)
        errors, converged, between, moved, out_big = width_study(
            activation="relu", scaled=False, widths=widths, seeds=cfg["seeds"],
            references=refs, data=(X_DATA, Y_DATA), say=say)
        shifted_start = time.perf_counter()
        gd_out, gd_ok = (np.asarray(a) for a in shifted.result()(*shifted_args))
    lazy = len(RELU_SMALL_WIDTHS)  # the fit starts at the shared grid's first width
    slope = fit_slope(cfg["widths"], np.nanmean(errors[lazy:], axis=(1, 2)))
    say(f"  gradient flow, width {n}, {len(SHIFTS)} shifted label sets: {int(gd_ok.sum())} "
         f"converged, {time.perf_counter() - shifted_start:.1f} s")
    shift_refs = np.stack([np.asarray(ibflow.relu_variational(X_DATA, np.asarray(yy), bias=BIAS)(
        jnp.asarray(EVAL_GRID))) for yy in ys])
    gd_err = np.max(np.abs(gd_out - shift_refs), axis=1)
    # Shifting labels by c does NOT shift the learned function by c (𝒢₂, 𝒢₃ at work):
    shape_change = np.max(np.abs(shift_refs - SHIFTS[:, None] - shift_refs[0]), axis=1)

    big = -1

    def functions(ax):
        for j, name in enumerate(POTENTIALS):
            ax.plot(EVAL_GRID, out_big[j, 0], lw=1, label=f"net, φ = {name}")
        ax.plot(EVAL_GRID, ref, "k--", lw=1.5, label="variational [LM-G]")
        ax.plot(X_DATA, Y_DATA, "ko")
        ax.set_title(f"ReLU, unscaled, n = {cfg['widths'][big]}")
        ax.legend(fontsize=8)

    def shifted(ax):
        for c, o, r in zip(SHIFTS, gd_out, shift_refs):
            ax.plot(EVAL_GRID, o, lw=1)
            ax.plot(EVAL_GRID, r, "k--", lw=0.8)
            ax.plot(X_DATA, Y_DATA + c, "ko", ms=3)
        ax.set_title(f"gradient flow, shifted labels (n = {n})")

    _plot(out / "mirror_relu.png", [functions, _error_panel(widths, errors, slope,
                                                            "ReLU + unscaled φ"), shifted])
    np.savez(out / "mirror_relu.npz", widths=np.asarray(widths), errors=errors,
             converged=converged, between_potentials=between, moved=moved, grid=EVAL_GRID,
             variational=ref, x=X_DATA, y=Y_DATA, shifts=SHIFTS, gd_outputs=gd_out,
             gd_references=shift_refs)
    summary = dict(
        widths=widths, fit_widths=list(cfg["widths"]), seeds=cfg["seeds"],
        decades=float(np.log10(cfg["widths"][-1] / cfg["widths"][0])),
        slope=slope[0], mean_linf_error=np.nanmean(errors, axis=(1, 2)).tolist(),
        converged_fraction=float(converged.mean()),
        linf_between_potentials_nets=between.tolist(),
        linf_between_potentials_variational=0.0,
        max_parameter_change=moved.tolist(),
        gd_shift_linf_error=gd_err.tolist(), gd_width=n,
        shift_changes_shape_linf=shape_change.tolist(),
        gd_converged=bool(np.all(gd_ok)),
        seconds=time.time() - start)
    (out / "mirror_relu.json").write_text(json.dumps(summary, indent=2))
    return summary


def run_abs(out: Path, full: bool, progress: bool = False) -> dict:
    say = lines(progress)
    cfg = settings(full)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    sols = [ibflow.abs_variational(ABS_X, ABS_Y, potential=ibflow.PolynomialPotential(*c),
                                   bias=BIAS)
            for c in POTENTIALS.values()]
    refs = np.stack([np.asarray(s(jnp.asarray(EVAL_GRID))) for s in sols])
    var_between = {f"{a} vs {b}": float(np.max(np.abs(refs[i] - refs[j])))
                   for i, a in enumerate(POTENTIALS) for j, b in enumerate(POTENTIALS) if i < j}
    errors, converged, between, moved, out_big = width_study(
        activation="abs", scaled=True, widths=cfg["widths"], seeds=cfg["seeds"], references=refs,
        data=(ABS_X, ABS_Y), say=say)
    slope = fit_slope(cfg["widths"], np.nanmean(errors, axis=(1, 2)))

    def functions(ax):
        for j, name in enumerate(POTENTIALS):
            line, = ax.plot(EVAL_GRID, out_big[j, 0], lw=1, label=f"net, φ = {name}")
            ax.plot(EVAL_GRID, refs[j], "--", color=line.get_color(), lw=1.5)
        ax.plot(ABS_X, ABS_Y, "ko")
        ax.set_title(f"|·|, scaled φ, n = {cfg['widths'][-1]} (dashed: [LM-B])")
        ax.legend(fontsize=8)

    def curvature(ax):
        for s, name in zip(sols, POTENTIALS):
            ax.hist(np.abs(np.asarray(s.curvature)), bins=60, histtype="step", density=True,
                    label=f"φ = {name}")
        ax.set_yscale("log")
        ax.set_xlabel("|h''(x)|, x uniform on supp p_B")
        ax.set_title("curvature of the variational solutions")
        ax.legend(fontsize=8)

    _plot(out / "mirror_abs.png", [functions, _error_panel(cfg["widths"], errors, slope,
                                                           "|·| + scaled φ"), curvature])
    np.savez(out / "mirror_abs.npz", widths=np.asarray(cfg["widths"]), errors=errors,
             converged=converged, between_potentials=between, moved=moved, grid=EVAL_GRID,
             variational=refs, x=ABS_X, y=ABS_Y,
             curvature=np.stack([np.asarray(s.curvature) for s in sols]),
             curvature_grid=np.asarray(sols[0].grid))
    summary = dict(
        widths=list(cfg["widths"]), seeds=cfg["seeds"],
        decades=float(np.log10(cfg["widths"][-1] / cfg["widths"][0])),
        slope=slope[0], mean_linf_error=np.nanmean(errors, axis=(1, 2)).tolist(),
        converged_fraction=float(converged.mean()),
        linf_between_potentials_nets=between.tolist(),
        linf_between_potentials_variational=var_between,
        variational_converged=[bool(s.status == ibflow.Status.converged) for s in sols],
        max_abs_curvature=[float(np.max(np.abs(np.asarray(s.curvature)))) for s in sols],
        max_parameter_change=moved.tolist(), seconds=time.time() - start)
    (out / "mirror_abs.json").write_text(json.dumps(summary, indent=2))
    return summary


def mirror_relu(out: Path, full: bool, progress: bool = False) -> dict:
    return run_relu(out, full, progress)


def mirror_abs(out: Path, full: bool, progress: bool = False) -> dict:
    return run_abs(out, full, progress)
