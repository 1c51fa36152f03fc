"""Figure 7.1 of Azulay et al. ([THEORY §2.8][theory-2-8]) and a dense α × s map beyond it.

The diagonal net's limit point depends on scale α and shape s only through
k = 4α(1+s²)/(1−s²) ([THEORY AZ-7.1][theory-az-7-1]): small k → min-ℓ1 (rich), large k → weighted ℓ2
(kernel).
"""

from pathlib import Path

import equinox as eqx
import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ibflow  # noqa: E402

PAPER_SHAPES = (0.0, 0.5, 0.7, 0.9, 0.99)
LINE_STYLES = ("-", ":", "-.", "--", (0, (5, 1)))
#: Reduced-ODE tolerance used by the reproductions. The diagonal net's reduced flow stays on the
#: invariant manifold at every step, so the limit point is the unique equilibrium there whatever
#: the path error; rtol only shapes the path. tests/test_sweep.py checks the limits against the
#: Theorem-1 minimizer to 1e-8.
SWEEP_RTOL = 1e-6


def problem(full: bool):
    """[THEORY §2.8][theory-2-8]: d = 1000, N = 100, k = 5, noise std 0.1, 2000 noiseless test
    points."""
    n, d = (100, 1000) if full else (50, 500)
    return ibflow.data.sparse_regression(jax.random.key(1993), n=n, d=d, k=5, noise=0.1,
                                         n_test=2000)


class UnbiasedDiagonal(eqx.Module):
    """``build`` for sweeps: an unbiased diagonal net of dimension `dim` from (α, s). A module
    (hashable by value) so that every sweep over the same dimension reuses one compilation."""

    dim: int = eqx.field(static=True)

    def __call__(self, scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=self.dim)


def shape_scale_sweep(data, scales, shapes, *, out: Path | None, early_stop: bool = False,
                      progress: bool = False):
    build = UnbiasedDiagonal(data.X.shape[1])
    # The original stops GD when (1/N)‖y − ŷ‖² < 1e-4, i.e. our ½·mean(r²) < 5e-5.
    extra = {"target_loss": 5e-5} if early_stop else {}
    return ibflow.sweep(build, ibflow.Grid(scale=scales, shape=shapes), data, out=out,
                        rtol=SWEEP_RTOL, atol=SWEEP_RTOL * 1e-4, progress=progress, **extra)


def run_shape_scale(out: Path, full: bool, progress: bool = False) -> dict:
    data = problem(full)
    scales = np.logspace(-5, -0.6, 20 if full else 12)
    exact = shape_scale_sweep(data, scales, PAPER_SHAPES, out=out / "exact", progress=progress)
    early = shape_scale_sweep(data, scales, PAPER_SHAPES, out=out / "early_stop", early_stop=True,
                              progress=progress)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, res, title in ((axes[0], exact, "exact limit point"),
                           (axes[1], early, "early stop at (1/N)‖r‖² < 1e-4 (as the original)")):
        for s_idx, (s, ls) in enumerate(zip(PAPER_SHAPES, LINE_STYLES)):
            ax.plot(scales, res["test_error"][:, s_idx], linestyle=ls, marker=".", label=f"s = {s}")
        ax.set_xscale("log")
        ax.set_xlabel("initialization scale α")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("population error (test MSE)")
    axes[0].legend()
    n, d = data.X.shape
    fig.suptitle(f"The effect of initialization shape and scale (d = {d}, N = {n})")
    fig.tight_layout()
    fig.savefig(out / "shape_scale.png", dpi=130)
    plt.close(fig)
    err = exact["test_error"]
    return {
        "figure": str(out / "shape_scale.png"), "d": d, "n": n,
        "converged": f"{int(exact.converged.sum())}/{exact.converged.size}",
        "max_final_loss": float(exact["loss"].max()),
        "lockstep_efficiency": exact.metadata["lockstep_efficiency"],
        "error_rises_with_scale": bool(np.all(err[-1] >= err[0])),
        "s=0.99_error_at_smallest_scale": float(err[0, -1]),
        "s=0_error_at_smallest_scale": float(err[0, 0]),
        "test_error_exact": err.round(5).tolist(),
    }


def run_shape_scale_map(out: Path, full: bool, progress: bool = False) -> dict:
    data = problem(full)
    size = 48 if full else 16
    scales = np.logspace(-6, 0, size)
    shapes = np.linspace(0.0, 0.995, size)
    res = shape_scale_sweep(data, scales, shapes, out=out / "sweep", progress=progress)
    d1, d2 = res["distance_min_l1"], res["distance_min_l2"]
    # Position 0 = at the min-ℓ1 interpolant, 1 = at the min-ℓ2 interpolant (by distances).
    position = d1 / (d1 + d2)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    extent = (np.log10(scales[0]), np.log10(scales[-1]), shapes[0], shapes[-1])
    for ax, values, title, cmap in ((axes[0], np.log10(res["test_error"]),
                                     "log10 population error", "viridis"),
                                    (axes[1], position, "position: 0 = min-ℓ1, 1 = min-ℓ2",
                                     "coolwarm")):
        im = ax.imshow(values.T, origin="lower", aspect="auto", extent=extent, cmap=cmap)
        ax.set_xlabel("log10 α")
        ax.set_ylabel("shape s")
        ax.set_title(title, fontsize=10)
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"Limit points of the diagonal net over scale × shape ({size}×{size} flows)")
    fig.tight_layout()
    fig.savefig(out / "shape_scale_map.png", dpi=130)
    plt.close(fig)
    return {"figure": str(out / "shape_scale_map.png"), "grid": [size, size],
            "converged": f"{int(res.converged.sum())}/{res.converged.size}",
            "lockstep_efficiency": res.metadata["lockstep_efficiency"],
            "position_range": [float(position.min()), float(position.max())]}
