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
# # ibflow quickstart
#
# Integrate gradient flow of a diagonal linear network *exactly* to its limit point, watch the
# loss fall through the plateau of a small initialization, and see where the limit lands between
# the min-ℓ1 and min-ℓ2 interpolants (docs/theory §2.3).
#
# With `IBFLOW_SMALL=1` in the environment the notebook runs on tiny settings (the test suite
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
n, d = (20, 100) if SMALL else (100, 1000)
data = ibflow.data.sparse_regression(jax.random.key(0), n=n, d=d, k=5, noise=0.1)
print("X", data.X.shape, "y", data.y.shape)

# %% [markdown]
# ## One flow
# Scale α = 1e-4, balanced shape s = 0. `integrate` stops when the loss reaches its target (an
# event), not at a guessed horizon; `save_at` records the trajectory.

# %%
model = ibflow.DiagonalNet.from_scale_shape(1e-4, 0.0, dim=d)
ts = jnp.logspace(-1, 5, 200)
sol = ibflow.integrate(model, data.X, data.y, save_at=ts)
print(
    f"{ibflow.Status[sol.status]} | final loss {float(sol.loss):.3g} | steps {int(sol.steps)} "
    f"| time {float(sol.time):.3g}"
)

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ok = np.isfinite(sol.trajectory.loss)
ax.loglog(ts[ok], sol.trajectory.loss[ok])
ax.set_xlabel("time t")
ax.set_ylabel("training loss")
ax.set_title("plateau, escape, exponential convergence")
plt.show()

# %% [markdown]
# ## Where did it land?
# Compare the limit with the minimum-ℓ1 interpolant (LP) and the minimum-ℓ2 interpolant; at
# small α the limit is close to ℓ1 (rich regime).

# %%
w = np.asarray(sol.predictor)
w_l1 = ibflow.min_l1_interpolant(data.X, data.y)
w_l2 = np.asarray(ibflow.min_l2_interpolant(data.X, data.y))
rel = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)
print(
    f"distance to min-l1 {rel(w, w_l1):.3g}, to min-l2 {rel(w, w_l2):.3g}, "
    f"test error {float(data.test_error(w)):.4g}"
)
fig, ax = plt.subplots(figsize=(7, 3.5))
idx = np.arange(d)
ax.plot(idx, w_l2, ".", ms=3, label="min-ℓ2", alpha=0.6)
ax.plot(idx, w_l1, "o", ms=5, mfc="none", label="min-ℓ1")
ax.plot(idx, w, "x", ms=4, label="flow limit (α = 1e-4)")
ax.set_xlabel("coordinate")
ax.set_ylabel("weight")
ax.legend()
plt.show()

# %% [markdown]
# ## Scale moves the limit
# Same problem, a few scales in one vmapped call (one compilation).

# %%
scales = jnp.logspace(-5, 0, 4 if SMALL else 8)
models = eqx.filter_vmap(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.0, dim=d))(scales)
sols = eqx.filter_vmap(lambda m: ibflow.integrate(m, data.X, data.y, throw=False))(models)
d1 = [rel(np.asarray(p), w_l1) for p in sols.predictor]
d2 = [rel(np.asarray(p), w_l2) for p in sols.predictor]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogx(scales, d1, "o-", label="to min-ℓ1")
ax.semilogx(scales, d2, "s-", label="to min-ℓ2")
ax.set_xlabel("scale α")
ax.set_ylabel("relative distance")
ax.legend()
plt.show()
