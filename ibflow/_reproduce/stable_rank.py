"""``ibflow reproduce stable-rank``: the low-rank bias of two-layer (leaky-)ReLU classifiers on
nearly orthogonal data, [THEORY §4.0][theory-4-0] (the seed study after Frei et al. 2023 and Kou et
al. 2023).

Stable rank of the first layer and spread of the normalized margins along the gradient flow, for
the initialization grid σ ∈ {1e-5, 5e-5, 1e-4, 5e-4, 1e-3}, on
(a) the Gaussian mixture (n = 10, d = 784, σ_p = 0.01, σ_e = 1, m = 100) with leaky ReLU (γ = 0.1),
(b) the same data with ReLU, (c) scikit-learn's digits (even vs odd, n = 50, d = 64, m = 100),
ReLU. Flows run in the log-loss clock through their kinks (located switches and Filippov
sliding, [THEORY §8.2][theory-8-2]; one compiled solve per data shape, member by member; the
digits panel here while a second process computes the two mixture panels), down to loss 1e-4
(default) or 1e-30 (``--full``: far into the asymptotic regime, where the seed claims a stable rank
≤ 2);
time on the plots is real gradient-flow time t. The summary reports each panel's final stable
ranks and whether they end at or below 2.
"""

import functools
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

# Private, for want of a public equivalent: a progress line on stderr, and the name of a
# status item (stored in the JSON).
from .._progress import lines
from .._status import STATUS_NAMES

SIGMAS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3)
WIDTH = 100
#: The panels: title → (data set, slope of the activation on the negative side).
PANELS = {
    "mixture, leaky ReLU (γ=0.1)": ("mixture", 0.1),
    "mixture, ReLU": ("mixture", 0.0),
    "digits (even vs odd), ReLU": ("digits", 0.0),
}
#: The panel this process computes while a second process computes the others, one after the
#: other: a member's solve keeps one core busy, the project's CPU has two, and two threads
#: cannot share the CPU device (one program waits for the other). The digits' five solves take
#: about as long as the two mixture panels' ten.
HERE = "digits (even vs odd), ReLU"


@functools.cache
def _data(name: str):
    if name == "mixture":
        return ibflow.data.gaussian_mixture(jax.random.key(2023))
    return ibflow.data.digits(task="parity", n=50)


@eqx.filter_jit
def _solve_one(model, X, y, *, target, num_save):
    """One member's flow, compiled once for every member and panel of the same shapes (the
    data are arguments, the slope an array leaf: the two mixture panels share one program).
    Member by member: under vmap the segment loop runs in lockstep, every member waiting for
    the others' events, so a loop over the members is faster."""
    return ibflow.classification_flow(model, X, y, target_loss=target, num_save=num_save,
                                      throw=False)


@eqx.filter_jit
def _members(X, slope, *, key):
    """The initializations of every σ, stacked: one program per data shape (`slope` an array
    argument), not an eager op per leaf."""
    return eqx.filter_vmap(lambda s: ibflow.TwoLayerClassifier.init(
        dim=X.shape[1], width=WIDTH, init_std=s, slope=slope, key=key))(jnp.asarray(SIGMAS))


def _solve_member(panel: str, i: int, *, target: float, num_save: int, progress: bool):
    """Member `i` (σ = ``SIGMAS[i]``) of `panel`: its `Solution` on the host and the seconds it
    took."""
    start = time.perf_counter()
    data, slope = _data(PANELS[panel][0]), PANELS[panel][1]
    models = _members(data.X, jnp.asarray(slope, dtype=float), key=jax.random.key(0))
    member = jax.tree_util.tree_map(lambda a: a[i], models)
    sol = jax.tree_util.tree_map(np.asarray, _solve_one(member, data.X, data.y, target=target,
                                                        num_save=num_save))
    seconds = time.perf_counter() - start
    lines(progress)(f"  {panel}, σ = {SIGMAS[i]:g}: {STATUS_NAMES[int(sol.status._value)]}, "
                    f"loss {float(sol.loss):.3g}, {int(sol.kinks.switches)} switches, "
                    f"{seconds:.1f} s")
    return sol, seconds


def _panel_results(panel: str, *, target: float, num_save: int, progress: bool,
                   path_points: int):
    """`panel`'s curves and summary entry (`_panel`) from its members' flows, one after the
    other. Picklable both ways: a worker process computes the panels other than `HERE`."""
    sols, seconds = zip(*(_solve_member(panel, i, target=target, num_save=num_save,
                                        progress=progress) for i in range(len(SIGMAS))),
                        strict=True)
    # Stacked on the host: a compiled stack of the many leaves took longer than the solves.
    sols = jax.tree_util.tree_map(lambda *a: np.stack(a), *sols)
    return _panel(panel, sols, list(seconds), target=target, path_points=path_points)


@eqx.filter_jit
def _summaries(sols, X, y):
    """The diagnostics along every member's trajectory, the final stable ranks, the sliding
    pairs at the end and the data's near-orthogonality: one program."""
    diag = eqx.filter_vmap(ibflow.trajectory_diagnostics, in_axes=(0, None, None))(
        sols.trajectory, X, y)
    return (diag, jax.vmap(ibflow.stable_rank)(sols.model.first),
            jnp.sum(sols.kinks.sliding, axis=(1, 2)), ibflow.data.near_orthogonality(X))


def _panel(name: str, sols, seconds: list, *, target: float, path_points: int):
    """One panel's curves (for the plot and the .npz) and its summary entry."""
    start = time.perf_counter()
    data = _data(PANELS[name][0])
    diag, ranks, sliding, orthogonality = _summaries(sols, data.X, data.y)
    final = jax.tree_util.tree_map(lambda v: v[-1], sols.model)
    kkt = ibflow.kkt_residual(final, data.X, data.y)  # the σ = 1e-3 member
    p = {"time": np.asarray(sols.trajectory.time), "loss": np.asarray(sols.trajectory.loss),
         "stable_rank": np.asarray(diag.stable_rank),
         "margin_spread": np.asarray(diag.margin_spread), "norm": np.asarray(diag.first_norm)}
    ranks = np.asarray(ranks)
    summary = {
        "near_orthogonality": float(orthogonality),
        "final_loss": np.asarray(sols.loss).tolist(),
        "converged": np.asarray(sols.converged).tolist(),
        "final_time": np.asarray(sols.time).tolist(),
        "steps": np.asarray(sols.steps).tolist(),
        "final_stable_rank": ranks.tolist(),
        "final_stable_rank_at_most_2": (ranks <= 2.0).tolist(),
        "status": [STATUS_NAMES[int(c)] for c in np.asarray(sols.status._value)],
        "final_margin_spread": [float(np.nanmin(v[np.isfinite(v)][-1:])) for v in
                                p["margin_spread"]],
        "kkt_stationarity_sigma_1e-3": kkt.stationarity,
        "kkt_kink_pairs_sigma_1e-3": kkt.kink_pairs,
        "switches": np.asarray(sols.kinks.switches).tolist(),
        "slides": np.asarray(sols.kinks.slides).tolist(),
        "sliding_at_end": np.asarray(sliding).tolist(),
    }
    if path_points:  # --full: the stationarity as the loss falls
        summary["kkt_stationarity_along_sigma_1e-3"] = [
            {"loss": loss, "stationarity": value}
            for loss, value in _kkt_path(sols, data.X, data.y, target, path_points)]
    summary["member_seconds"] = [round(v, 1) for v in seconds]
    summary["seconds"] = round(sum(seconds) + time.perf_counter() - start, 1)
    return p, summary


def _kkt_path(sols, X, y, target, points):
    """The KKT stationarity of the σ = 1e-3 member where its loss first falls below each of
    `points` levels, log-spaced from 1e-1 to `target`: ``[(loss, stationarity), …]`` (a host
    solve per point, `ibflow.kkt_residual`)."""
    loss = np.asarray(sols.trajectory.loss[-1])
    valid = np.asarray(sols.trajectory.valid[-1]) & np.isfinite(loss)
    firsts = sorted({int(np.argmax(below)) for level in np.logspace(-1, np.log10(target), points)
                     if (below := valid & (loss <= level * (1 + 1e-9))).any()})
    models = [jax.tree_util.tree_map(lambda v, k=k: v[-1, k], sols.trajectory.models)
              for k in firsts]
    return [(float(loss[k]), ibflow.kkt_residual(model, X, y).stationarity)
            for k, model in zip(firsts, models, strict=True)]


def _plot(out, panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.2 * len(panels)), squeeze=False)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(SIGMAS)))
    for row, (title, p) in zip(axes, panels.items(), strict=True):
        for k, sigma in enumerate(SIGMAS):
            ok = np.isfinite(p["time"][k]) & (p["time"][k] > 0)
            row[0].plot(p["time"][k][ok], p["stable_rank"][k][ok], color=colors[k],
                        label=f"σ = {sigma:g}")
            row[1].plot(p["time"][k][ok], p["margin_spread"][k][ok], color=colors[k])
        row[0].set(xscale="log", ylabel="stable rank of W", title=title)
        row[0].axhline(2.0, color="gray", lw=0.8, ls="--")
        row[1].set(xscale="log", yscale="log", ylabel="margin spread (max−min)/max",
                   title="normalized margins")
        row[0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("gradient-flow time t")
    fig.tight_layout()
    fig.savefig(out / "stable_rank.png", dpi=120)
    plt.close(fig)


def _beside_here(options: dict, path: Path) -> dict:
    """Every panel's `_panel_results`: `HERE`'s in this process while a second Python process
    (``python -m ibflow._reproduce.stable_rank``, not `multiprocessing`: its spawn start re-runs
    a caller's unguarded script) computes the others into `path`."""
    # The worker imports this ibflow, wherever the caller imported it from.
    root = str(Path(ibflow.__file__).resolve().parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [
        root, os.environ.get("PYTHONPATH")]))}
    worker = subprocess.Popen([sys.executable, "-m", __name__, json.dumps(options), str(path)],
                              env=env)
    try:
        results = {HERE: _panel_results(HERE, **options)}
    except BaseException:  # Ctrl-C included: no orphan left computing
        worker.kill()
        raise
    if (code := worker.wait()) != 0:
        raise RuntimeError(f"the process computing the panels other than {HERE!r} failed "
                           f"(exit status {code}; its traceback is above)")
    return results | pickle.loads(path.read_bytes())


def _worker(argv: list) -> None:
    """``python -m ibflow._reproduce.stable_rank OPTIONS_JSON PATH``: the panels other than
    `HERE`, pickled into PATH (`_beside_here`)."""
    options, path = json.loads(argv[0]), Path(argv[1])
    path.write_bytes(pickle.dumps({name: _panel_results(name, **options)
                                   for name in PANELS if name != HERE}))


def run(out: Path, full: bool, progress: bool = False) -> dict:
    say = lines(progress)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = 1e-30 if full else 1e-4
    options = dict(target=target, num_save=64 if full else 24, progress=progress,
                   path_points=6 if full else 0)
    panels, summary, arrays = {}, {"target_loss": target, "sigmas": list(SIGMAS)}, {}
    say(f"{len(PANELS)} panels of {len(SIGMAS)} flows; {HERE!r} beside the others (a second "
        "process)")
    with tempfile.TemporaryDirectory() as tmp:
        results = _beside_here(options, Path(tmp) / "panels.pickle")
    for name, (_, slope) in PANELS.items():
        panels[name], summary[name] = results[name]
        tag = name.split(",")[0].split(" ")[0] + ("_leaky" if slope > 0 else "_relu")
        arrays.update({f"{tag}_{k}": v for k, v in panels[name].items()})
    np.savez(out / "stable_rank.npz", sigmas=np.asarray(SIGMAS), **arrays)
    _plot(out, panels)
    (out / "stable_rank.json").write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    _worker(sys.argv[1:])
