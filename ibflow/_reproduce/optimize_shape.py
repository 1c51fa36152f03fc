"""Learned per-coordinate initialization shapes of the diagonal net: gradient descent
on the validation error of the flow's limit point, with exact implicit gradients, against
balanced (s = 0) and the best uniform shape of a sweep ([THEORY AZ-7.1][theory-az-7-1],
[AZ-T1][theory-az-t1], [§2.8][theory-2-8] data).
"""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import ibflow  # noqa: E402


def split_problem(key, *, n_train: int, n_val: int, d: int, k: int = 5, noise: float = 0.1,
                  n_test: int = 2000):
    """[THEORY §2.8][theory-2-8] sparse regression with ``n_train + n_val`` noisy samples split into
    training and validation sets; the test set is noiseless."""
    data = ibflow.data.sparse_regression(key, n=n_train + n_val, d=d, k=k, noise=noise,
                                         n_test=n_test)
    return data, (data.X[:n_train], data.y[:n_train]), (data.X[n_train:], data.y[n_train:])


def compare_shapes(data, train, val, *, scales, shapes, steps: int, learning_rate: float = 0.05,
                   init_shape: float = 0.5, progress: bool = False) -> dict:
    """For each scale α: balanced (s = 0) and the uniform shape with the lowest validation
    error (an `ibflow.sweep` of gradient flows over ``scales × shapes``, ``shapes[0] = 0``),
    and the per-coordinate shape learned by `optimize_shape` (all scales in one vmapped
    optimization). Every limit is checked against an independent `integrate` of its flow."""
    (X, y), (X_val, y_val) = train, val
    d = X.shape[1]
    scales, shapes = np.asarray(scales, dtype=float), np.asarray(shapes, dtype=float)
    if shapes[0] != 0.0:
        raise ValueError("shapes[0] must be 0 (the balanced reference).")

    def build(scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=d)

    swept = ibflow.sweep(build, ibflow.Grid(scale=scales, shape=shapes), (X, y, X_val, y_val),
                  references=(), progress=progress)
    val_uniform = swept["test_error"]  # the sweep's "test" set is our validation set
    test_uniform = np.asarray(data.test_error(jnp.asarray(swept["predictor"])))
    best = np.argmin(val_uniform, axis=1)

    optimizer = optax.adam(learning_rate)
    learned = eqx.filter_vmap(
        lambda a: ibflow.optimize_shape(X, y, X_val, y_val, scale=a, init_shape=init_shape,
                                 steps=steps, optimizer=optimizer))(jnp.asarray(scales))
    # The learned limits by the flow itself (closed-form reduced ODE), not by the minimizer.
    flows = eqx.filter_vmap(lambda a, s: ibflow.integrate(
        ibflow.DiagonalNet.from_scale_shape(a, s), X, y, throw=False))(jnp.asarray(scales),
                                                                       learned.shape)
    gap = np.asarray(jnp.linalg.norm(flows.predictor - learned.predictor, axis=1)
                     / jnp.linalg.norm(learned.predictor, axis=1))
    rows = np.arange(len(scales))
    return {
        "scales": scales, "shapes": shapes, "support": np.asarray(data.w_star != 0),
        "val_uniform": val_uniform, "test_uniform": test_uniform,
        "best_uniform_shape": shapes[best],
        "val_balanced": val_uniform[:, 0], "test_balanced": test_uniform[:, 0],
        "val_best_uniform": val_uniform[rows, best],
        "test_best_uniform": test_uniform[rows, best],
        "val_learned": np.asarray(learned.validation_error),
        "test_learned": np.asarray(data.test_error(learned.predictor)),
        "learned_shape": np.asarray(learned.shape), "history": np.asarray(learned.history),
        "minimizer_converged": np.asarray(learned.converged),
        "sweep_converged": swept.converged, "flows_converged": np.asarray(flows.converged),
        "flow_vs_implicit": gap,
    }


def _label(ax, xlabel: str, ylabel: str, title: str):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)


def plot(result: dict, path: Path, title: str):
    scales, support = result["scales"], result["support"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    for key, label, style in (("balanced", "balanced s = 0", "o-"),
                              ("best_uniform", "best uniform s (sweep)", "s-"),
                              ("learned", "learned per-coordinate s", "^-")):
        line, = ax.plot(scales, result[f"test_{key}"], style, label=f"{label}: test")
        ax.plot(scales, result[f"val_{key}"], style[0], color=line.get_color(), alpha=0.45,
                linestyle=":", label=f"{label}: validation")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _label(ax, "initialization scale α", "MSE of the limit point",
           "validation (dotted) and test (solid) error")
    ax.grid(alpha=0.3)
    ax = axes[1]
    i = len(scales) - 1
    shape = np.abs(result["learned_shape"][i])
    idx = np.arange(shape.size)
    ax.bar(idx[~support], shape[~support], color="0.6", width=1.0, label="off support")
    ax.bar(idx[support], shape[support], color="C3", width=1.0, label="support of w*")
    ax.axhline(abs(result["best_uniform_shape"][i]), color="C1", ls="--", label="best uniform")
    _label(ax, "coordinate i", "learned |s_i|", f"learned shape at α = {scales[i]:.0e}")
    ax = axes[2]
    for j, a in enumerate(scales):
        ax.plot(result["history"][j], label=f"α = {a:.0e}")
    ax.set_yscale("log")
    _label(ax, "Adam step", "validation MSE of the limit",
           "optimization (exact implicit gradients)")
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def run_optimize_shape(out: Path, full: bool, progress: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    if full:
        sizes = dict(n_train=100, n_val=100, d=1000)
        scales, shapes, steps = np.logspace(-4, -0.6, 6), np.linspace(0.0, 0.99, 24), 300
    else:
        sizes = dict(n_train=30, n_val=30, d=120)
        scales, shapes, steps = np.logspace(-3, -0.6, 3), np.linspace(0.0, 0.99, 12), 100
    data, train, val = split_problem(jax.random.key(1993), **sizes)
    result = compare_shapes(data, train, val, scales=scales, shapes=shapes, steps=steps,
                            progress=progress)
    figure = out / "optimize_shape.png"
    plot(result, figure, f"Learning the initialization shape (d = {sizes['d']}, "
                         f"{sizes['n_train']} train / {sizes['n_val']} validation samples)")
    np.savez(out / "optimize_shape.npz", **result)
    summary = {
        "figure": str(figure), **sizes, "steps": steps, "scales": scales.tolist(),
        "test_balanced": result["test_balanced"].tolist(),
        "test_best_uniform": result["test_best_uniform"].tolist(),
        "test_learned": result["test_learned"].tolist(),
        "val_balanced": result["val_balanced"].tolist(),
        "val_best_uniform": result["val_best_uniform"].tolist(),
        "val_learned": result["val_learned"].tolist(),
        "best_uniform_shape": result["best_uniform_shape"].tolist(),
        "mean_learned_abs_shape_on_support": np.abs(result["learned_shape"])[:, result["support"]]
        .mean(axis=1).tolist(),
        "mean_learned_abs_shape_off_support": np.abs(result["learned_shape"])[:, ~result["support"]]
        .mean(axis=1).tolist(),
        "max_flow_vs_implicit_relative": float(result["flow_vs_implicit"].max()),
        "all_converged": bool(result["minimizer_converged"].all()
                              and result["sweep_converged"].all()
                              and result["flows_converged"].all()),
    }
    (out / "optimize_shape.json").write_text(json.dumps(summary, indent=2))
    return summary
