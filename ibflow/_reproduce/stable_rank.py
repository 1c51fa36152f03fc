"""``ibflow reproduce stable-rank``: the low-rank bias of two-layer (leaky-)ReLU classifiers on
nearly orthogonal data, [THEORY §4.0][theory-4-0] (the seed study after Frei et al. 2023 and Kou et
al. 2023).

Stable rank of the first layer and spread of the normalized margins along the gradient flow, for
the initialization grid σ ∈ {1e-5, 5e-5, 1e-4, 5e-4, 1e-3}, on
(a) the Gaussian mixture (n = 10, d = 784, σ_p = 0.01, σ_e = 1, m = 100) with leaky ReLU (γ = 0.1),
(b) the same data with ReLU, (c) scikit-learn's digits (even vs odd, n = 50, d = 64, m = 100),
ReLU. Flows run in the log-loss clock through their kinks (located switches and Filippov
sliding, [THEORY §8.2][theory-8-2]; one compiled solve, member by member), down to loss 1e-4
(default) or 1e-30 (``--full``: far into the asymptotic regime, where the seed claims a stable rank
≤ 2);
time on the plots is real gradient-flow time t. The summary reports each panel's final stable
ranks and whether they end at or below 2.
"""

import json
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow

# Private, for want of a public equivalent: a progress line on stderr, and the name of a
# status item (stored in the JSON).
from .._progress import line, lines
from .._status import STATUS_NAMES

SIGMAS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3)


@eqx.filter_jit
def _solve_one(model, X, y, *, target, num_save):
    """One member's flow, compiled once for every member and panel of the same shapes (the
    data are arguments, the slope an array leaf: the two mixture panels share one program).
    Member by member: under vmap the segment loop runs in lockstep, every member waiting for
    the others' events, so a loop over the members is faster."""
    return ibflow.classification_flow(model, X, y, target_loss=target, num_save=num_save,
                                      throw=False)


def _sweep(X, y, *, slope, width, target, num_save, key, say=line, path_points=0):
    sigmas = jnp.asarray(SIGMAS)
    models = eqx.filter_vmap(lambda s: ibflow.TwoLayerClassifier.init(
        dim=X.shape[1], width=width, init_std=s, slope=slope, key=key))(sigmas)
    outs = []
    for i, sigma in enumerate(SIGMAS):
        start = time.perf_counter()
        member = jax.tree_util.tree_map(lambda a, i=i: a[i], models)
        outs.append(_solve_one(member, X, y, target=target, num_save=num_save))
        say(f"  σ = {sigma:g}: {STATUS_NAMES[int(outs[-1].status._value)]}, loss "
             f"{float(outs[-1].loss):.3g}, {int(outs[-1].kinks.switches)} switches, "
             f"{time.perf_counter() - start:.1f} s")
    sols = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *outs)
    diag = eqx.filter_vmap(ibflow.trajectory_diagnostics, in_axes=(0, None, None))(
        sols.trajectory, X, y)
    final = jax.tree_util.tree_map(lambda v: v[-1], sols.model)
    kkt = ibflow.kkt_residual(final, X, y)  # the σ = 1e-3 member
    return sols, diag, kkt, _kkt_path(sols, X, y, target, path_points)


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


def run(out: Path, full: bool, progress: bool = False) -> dict:
    say = lines(progress)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = 1e-30 if full else 1e-4
    num_save = 64 if full else 24
    key = jax.random.key(0)
    mix = ibflow.data.gaussian_mixture(jax.random.key(2023))
    dig = ibflow.data.digits(task="parity", n=50)
    settings = {
        "mixture, leaky ReLU (γ=0.1)": (mix, 0.1),
        "mixture, ReLU": (mix, 0.0),
        "digits (even vs odd), ReLU": (dig, 0.0),
    }
    panels, summary, arrays = {}, {"target_loss": target, "sigmas": list(SIGMAS)}, {}
    for name, (data, slope) in settings.items():
        say(f"{name}:")
        start = time.perf_counter()
        sols, diag, kkt, kkt_path = _sweep(
            data.X, data.y, slope=slope, width=100, target=target, num_save=num_save, key=key,
            say=say, path_points=6 if full else 0)
        p = {"time": np.asarray(sols.trajectory.time), "loss": np.asarray(sols.trajectory.loss),
             "stable_rank": np.asarray(diag.stable_rank),
             "margin_spread": np.asarray(diag.margin_spread),
             "norm": np.asarray(diag.first_norm)}
        panels[name] = p
        ranks = np.asarray(jax.vmap(ibflow.stable_rank)(sols.model.first))
        tag = name.split(",")[0].split(" ")[0] + ("_leaky" if slope > 0 else "_relu")
        arrays.update({f"{tag}_{k}": v for k, v in p.items()})
        summary[name] = {
            "near_orthogonality": float(ibflow.data.near_orthogonality(data.X)),
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
            "sliding_at_end": np.asarray(jnp.sum(sols.kinks.sliding, axis=(1, 2))).tolist(),
            "seconds": round(time.perf_counter() - start, 1),
        }
        if kkt_path:  # --full: the stationarity as the loss falls
            summary[name]["kkt_stationarity_along_sigma_1e-3"] = [
                {"loss": loss, "stationarity": value} for loss, value in kkt_path]
    np.savez(out / "stable_rank.npz", sigmas=np.asarray(SIGMAS), **arrays)
    _plot(out, panels)
    (out / "stable_rank.json").write_text(json.dumps(summary, indent=2))
    return summary
