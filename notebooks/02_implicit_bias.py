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
# # 02 — Implicit bias: flow limits, exact regularizers, regimes, and the Hessian-map test
#
# Gradient flow on a diagonal linear network converges, among all interpolators of `Xw = y`, to
# the minimiser of an explicit regularizer `Q` (docs/theory §2.3, [AZ-T1]). This notebook puts the
# limit computed by `ibflow.integrate` next to
#
# * the exact minimiser of `Q` (`ibflow.implicit_bias` + `ibflow.minimize_regularizer`),
# * the min-ℓ1 and min-ℓ2 interpolants (the rich and the kernel limits),
# * the NTK limit (`ibflow.ntk_predictor`, docs/theory [AZ-F]),
#
# maps the regime (distance of the limit to ℓ1 and to ℓ2) over initialization scale α and shape s,
# and shows the Hessian-map test ([AZ-HMC], [AZ-WARP]) that decides when a flow is a mirror flow.
#
# With `IBFLOW_SMALL=1` in the environment everything runs on tiny settings (the test suite
# executes it that way). Randomness comes from explicit JAX keys only.

# %%
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import ibflow

SMALL = os.environ.get("IBFLOW_SMALL") == "1"
n, d, k = (12, 30, 3) if SMALL else (30, 120, 4)
alphas = np.logspace(-8, 1, 4 if SMALL else 10)
shapes = np.array([0.0, 0.6, 0.95] if SMALL else [0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99])
data = ibflow.data.sparse_regression(jax.random.key(0), n=n, d=d, k=k, noise=0.0, n_test=200)
X, y = data.X, data.y
print(f"n={n}, d={d}, k={k}; grid {len(alphas)} x {len(shapes)}")

# %% [markdown]
# ## Flow limits and exact minimisers on the whole α × s grid
#
# One vmapped call integrates every initialization of the grid (the diagonal net's reduced
# n-dimensional ODE, docs/theory §2.3) and one vmapped call solves every `argmin Q` by dual Newton.

# %%
A, S = np.meshgrid(alphas, shapes, indexing="ij")
models = eqx.filter_vmap(lambda a, s: ibflow.DiagonalNet.from_scale_shape(a, s, dim=d))(
    jnp.asarray(A.ravel()), jnp.asarray(S.ravel())
)


@eqx.filter_jit
def limits(models):
    sol = jax.vmap(lambda m: ibflow.integrate(m, X, y, throw=False))(models)
    q = jax.vmap(lambda m: ibflow.minimize_regularizer(ibflow.implicit_bias(m), X, y, throw=False))(
        models
    )
    ntk = jax.vmap(lambda m: ibflow.ntk_predictor(m, X, y))(models)
    return sol, q, ntk


sol, qmin, ntk = limits(models)
assert bool(jnp.all(sol.converged)), ibflow.Status[sol.status]
w_l1 = np.asarray(ibflow.min_l1_interpolant(X, y))
w_l2 = np.asarray(ibflow.min_l2_interpolant(X, y))
rel = lambda a, b: np.linalg.norm(np.asarray(a) - b, axis=-1) / np.linalg.norm(b)
gf = np.asarray(sol.predictor)
print("max over the grid of |GF − argmin Q| / |argmin Q|:", rel(gf, np.asarray(qmin.w)).max())
print(
    "max feasibility / stationarity residual of argmin Q:",
    float(qmin.feasibility.max()),
    float(qmin.stationarity.max()),
)

# %% [markdown]
# ## One problem in detail
#
# Small scale and balanced layers (rich regime): the flow limit is close to min-ℓ1; it equals the
# exact `argmin Q` to solver precision.

# %%
i = 0  # smallest α, s = 0
print(f"alpha = {A.ravel()[i]:.0e}, s = {S.ravel()[i]}")
rows = {"argmin Q": qmin.w[i], "min-l1": w_l1, "min-l2": w_l2, "NTK limit": ntk[i]}
for name, w in rows.items():
    print(
        f"  |GF - {name:9s}| / |{name}| = {rel(gf[i], np.asarray(w)):.2e}   "
        f"test error {float(data.test_error(w)):.3e}"
    )
fig, ax = plt.subplots(figsize=(8, 3))
idx = np.arange(d)
ax.stem(idx, gf[i], linefmt="C0-", markerfmt="C0o", basefmt=" ", label="gradient-flow limit")
ax.plot(idx, np.asarray(qmin.w[i]), "k+", ms=10, label="argmin Q")
ax.plot(idx, w_l1, "C1x", label="min-ℓ1")
ax.plot(idx, w_l2, "C2.", label="min-ℓ2")
ax.set_xlabel("coordinate")
ax.set_ylabel("weight")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Regime map
#
# Relative distance of the flow limit to min-ℓ1 and to min-ℓ2 over α (scale) and s (shape). Small α
# with balanced layers is the rich (ℓ1) regime; large α *or* |s| → 1 is the kernel regime, here
# plain ℓ2 because every coordinate has the same k (docs/theory §2.3 "Limits").

# %%
d_l1 = rel(gf, w_l1).reshape(A.shape)
d_l2 = rel(gf, w_l2).reshape(A.shape)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
for ax, dist, name in zip(axes, (d_l1, d_l2), ("min-ℓ1", "min-ℓ2")):
    im = ax.pcolormesh(
        np.arange(len(alphas) + 1),
        np.arange(len(shapes) + 1),
        np.log10(dist.T + 1e-16),
        cmap="viridis",
        shading="flat",
    )
    ax.set_xticks(np.arange(len(alphas)) + 0.5, [f"{a:.0e}" for a in alphas], rotation=60)
    ax.set_yticks(np.arange(len(shapes)) + 0.5, [str(s) for s in shapes])
    ax.set_xlabel("scale α")
    ax.set_title(f"log10 distance to {name}")
    fig.colorbar(im, ax=ax)
axes[0].set_ylabel("shape s")
plt.tight_layout()
plt.show()
print("distance to l1 (smallest alpha, s=0):", d_l1[0, 0])
print("distance to l2 (largest alpha, s=0):", d_l2[-1, 0])

# %% [markdown]
# ## The Hessian-map test ([AZ-HMC], [AZ-WARP])
#
# Gradient flow is a mirror flow iff the predictor-space metric `H = (J Jᵀ)⁻¹` is a Hessian, i.e.
# `∂ₖH_ij` is symmetric in (j, k). The diagonal net passes; the single FC neuron
# (`M = a²I + wwᵀ`, docs/theory §2.4) fails for d ≥ 2; multiplying by the warp g = |a| repairs it.
# Relative asymmetry at random points w̃ ∈ ℝ³, as a function of the balancedness δ (values below
# 1e-16 are roundoff).

# %%
deltas = np.linspace(-5, 5, 11 if SMALL else 41)
pts = jax.random.normal(jax.random.key(1), (len(deltas), 3))


@eqx.filter_jit
def asymmetries(deltas, pts):
    def one(delta, w):
        fc = ibflow.NeuronInverseMetric(delta)
        diag = ibflow.DiagonalInverseMetric(jnp.ones(3) * (1.0 + delta**2))
        return (
            ibflow.hessian_map_asymmetry(fc, w).relative,
            ibflow.hessian_map_asymmetry(fc, w, warp=fc.warp).relative,
            ibflow.hessian_map_asymmetry(diag, w).relative,
        )

    return jax.vmap(one)(deltas, pts)


fc_rel, warped_rel, diag_rel = (np.asarray(v) for v in asymmetries(jnp.asarray(deltas), pts))
fig, ax = plt.subplots(figsize=(6, 3.5))
floor = 1e-18
ax.semilogy(deltas, fc_rel + floor, "o-", label="FC single neuron, g = 1")
ax.semilogy(deltas, warped_rel + floor, "s-", label="FC single neuron, warped g = |a|")
ax.semilogy(deltas, diag_rel + floor, "^-", label="diagonal net")
ax.set_xlabel("δ = a² − ‖w‖²")
ax.set_ylabel("relative asymmetry of ∂H")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
print("FC: min", fc_rel.min(), "| warped: max", warped_rel.max(), "| diagonal: max", diag_rel.max())
assert fc_rel.min() > 0.1 and warped_rel.max() < 1e-12 and diag_rel.max() < 1e-12
