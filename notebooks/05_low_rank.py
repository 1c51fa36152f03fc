# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Low-rank bias of two-layer classifiers on nearly orthogonal data
#
# docs/theory §4: a two-layer (leaky-)ReLU network $f(x;W)=\sum_j a_j\,\phi(\langle w_j,x\rangle)$
# with a fixed second layer $a_j=\pm1/\sqrt m$, trained by gradient flow on the logistic loss, has
# $\|W\|\to\infty$. On nearly orthogonal data Frei et al. (2023) prove that $W/\|W\|$ tends to a
# KKT point of the max-margin problem of stable rank $\le 2$ (leaky ReLU), and Kou et al. (2023)
# that all training points reach the same normalized margin.
#
# `ibflow.classification_flow` integrates the flow exactly (reduced to
# $W(t)-W(0)\in\operatorname{span}\{x_i\}$) in the log-loss clock $s=-\log L$, so reaching loss
# $10^{-8}$ costs about as much as reaching $10^{-2}$. It runs through the activation's kinks:
# every crossing of a pre-activation through 0 is located, and pairs that the field pushes into
# the kink from both sides *slide* on it (Filippov, docs/theory §8.2; `Solution.kinks` counts them).
#
# With `IBFLOW_SMALL=1` in the environment everything is tiny (the test suite executes it that
# way). Randomness comes from explicit JAX keys only.

# %%
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import ibflow
from ibflow.data import digits, gaussian_mixture, near_orthogonality

SMALL = os.environ.get("IBFLOW_SMALL") == "1"
n, d, m = (8, 784, 20) if SMALL else (10, 784, 100)
target = 1e-3 if SMALL else 1e-8
sigmas = jnp.array([1e-5, 1e-3] if SMALL else [1e-5, 5e-5, 1e-4, 5e-4, 1e-3])
data = gaussian_mixture(jax.random.key(0), n=n, d=d)
print("near-orthogonality n·max|<x_i,x_k>|/min|x_i|² =", float(near_orthogonality(data.X)))


# %% [markdown]
# ## A σ-sweep in one vmapped solve
# The initialization scale σ is an array leaf of the model, so the sweep compiles once.


# %%
def sweep(slope):
    models = eqx.filter_vmap(
        lambda s: ibflow.TwoLayerClassifier.init(
            dim=d, width=m, init_std=s, slope=slope, key=jax.random.key(1)
        )
    )(sigmas)
    sols = eqx.filter_vmap(
        lambda mdl: ibflow.classification_flow(
            mdl, data.X, data.y, target_loss=target, num_save=12 if SMALL else 48, throw=False
        )
    )(models)
    diag = eqx.filter_vmap(ibflow.trajectory_diagnostics, in_axes=(0, None, None))(
        sols.trajectory, data.X, data.y
    )
    return sols, diag


runs = {"leaky ReLU (γ=0.1)": sweep(0.1)}
if not SMALL:  # ReLU: hundreds of pairs reach the kink and slide (more switching events)
    runs["ReLU"] = sweep(0.0)
for name, (sols, diag) in runs.items():
    print(name, "converged:", np.asarray(sols.converged), " final loss:", np.asarray(sols.loss))
    print("   switches:", np.asarray(sols.kinks.switches), " sliding pairs at the end:",
          np.asarray(jnp.sum(sols.kinks.sliding, axis=(1, 2))))
    print(
        "   final stable rank:",
        np.round(np.asarray(diag.stable_rank[:, -1]), 3),
        " margin spread:",
        np.round(np.asarray(diag.margin_spread[:, -1]), 4),
    )

# %%
fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.5), squeeze=False)
axes = axes[0]
for ax, (name, (sols, diag)) in zip(axes, runs.items()):
    for k, s in enumerate(np.asarray(sigmas)):
        t = np.asarray(sols.trajectory.time[k])
        ok = np.isfinite(t) & (t > 0)
        ax.plot(t[ok], np.asarray(diag.stable_rank[k])[ok], label=f"σ = {s:g}")
    ax.axhline(2, color="gray", ls="--", lw=0.8)
    ax.set(xscale="log", xlabel="gradient-flow time t", ylabel="stable rank of W", title=name)
    ax.legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# ## Convergence to a KKT point
# `kkt_residual` is the distance of $\theta/\|\theta\|$ to the cone of the margin subgradients
# $\{\sum_i\lambda_i y_i g_i\,:\,\lambda\ge0\}$, where a pair on the kink (a sliding pre-activation,
# held at exactly 0 by the flow) may take any $\phi'(0)\in[\gamma,1]$ (the Clarke subdifferential);
# it decreases along the flow, slowly — directional convergence is logarithmic in t.

# %%
sols, diag = runs["leaky ReLU (γ=0.1)"]
member = jax.tree_util.tree_map(lambda v: v[0], sols.trajectory)
res = ibflow.kkt_residuals(member, data.X, data.y)
for loss, r in zip(np.asarray(member.loss), res):
    print(f"loss {loss:9.2e}   KKT stationarity residual {r:.4f}")

# %% [markdown]
# ## Gradient descent with a small step follows the flow
# GD at step η is compared with the flow in real time at $t=k\eta$.

# %%
model = ibflow.TwoLayerClassifier.init(
    dim=d, width=m, init_std=1e-3, slope=0.1, key=jax.random.key(1)
)
T, eta, every = (0.5, 2e-3, 25) if SMALL else (2.0, 1e-4, 2000)
ts = jnp.linspace(0.0, T, int(round(T / (eta * every))) + 1)
flow = ibflow.classification_flow(
    model, data.X, data.y, flow=ibflow.GradientFlow(), save_at=ts, clock_max=T,
    target_loss=1e-12, throw=False,
)
gd = ibflow.gradient_descent(
    model, data.X, data.y, learning_rate=eta, num_steps=every * (len(ts) - 1), save_every=every
)
gap = jnp.max(jnp.abs(gd.trajectory.loss / flow.trajectory.loss - 1))
print("max relative loss gap:", float(gap))
print(
    "stable rank, flow:",
    np.round(
        np.asarray(ibflow.trajectory_diagnostics(flow.trajectory, data.X, data.y).stable_rank), 3
    ),
)
print(
    "stable rank, GD:  ",
    np.round(
        np.asarray(ibflow.trajectory_diagnostics(gd.trajectory, data.X, data.y).stable_rank), 3
    ),
)

# %% [markdown]
# ## Real data: the digits are far from orthogonal
# All pixels are nonnegative, so $\langle x_i,x_k\rangle$ is large and the near-orthogonality number
# is ≫ 1.
# (MNIST and CIFAR-10 load from local files with `ibflow.data.load_mnist` / `load_cifar10`.)

# %%
if not SMALL:
    dig = digits(task="parity", n=100)
    print("digits near-orthogonality:", float(near_orthogonality(dig.X)))
    model = ibflow.TwoLayerClassifier.init(dim=64, width=100, init_std=1e-4, key=jax.random.key(2))
    sol = ibflow.classification_flow(model, dig.X, dig.y, target_loss=1e-4, throw=False)
    dd = ibflow.classifier_diagnostics(sol.model, dig.X, dig.y)
    print("final stable rank", float(dd.stable_rank), "margin spread", float(dd.margin_spread))
