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
# # Regime map from a saved sweep
#
# A sweep writes an open results directory (`results.npz` + `sweep.json`, readable without
# ibflow). This notebook runs a small α × s sweep (or reuses the directory if it exists —
# re-running resumes) and explores it: test error, distance to min-ℓ1 / min-ℓ2, and slices through
# the map.
#
# With `IBFLOW_SMALL=1` in the environment the notebook runs a tiny grid (the test suite executes it
# that way); `IBFLOW_RESULTS` sets the results directory. The data come from an explicit JAX key.

# %%
import json
import os
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np

import ibflow

SMALL = os.environ.get("IBFLOW_SMALL") == "1"
OUT = Path(os.environ.get("IBFLOW_RESULTS", "ibflow-results/regimes"))
n, d, size = (16, 80, 5) if SMALL else (100, 1000, 24)
data = ibflow.data.sparse_regression(jax.random.key(1993), n=n, d=d, k=5)
grid = ibflow.Grid(scale=np.logspace(-5, 0, size), shape=np.linspace(0, 0.99, size))
res = ibflow.sweep(
    lambda scale, shape: ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=d),
    grid,
    data,
    out=OUT,
    rtol=1e-6,
    atol=1e-10,
    progress=False,
)
print(res)

# %% [markdown]
# ## The sweep's values on the (α, s) grid, as a labeled xarray Dataset
# `ibflow.open_sweep(OUT)` (or `res.to_xarray()`) gives named dimensions `scale` and `shape`,
# their coordinates, units and descriptions; every plot below reads the sweep through this cell.

# %%
ds = ibflow.open_sweep(OUT)
print(ds)
scales, shapes = ds["scale"].values, ds["shape"].values
maps = {key: ds[key].transpose("scale", "shape").values
        for key in ("test_error", "distance_min_l1", "distance_min_l2")}
assert all(v.shape == (len(scales), len(shapes)) for v in maps.values())
# Select by coordinate value: the test error along the balanced shape s = 0.
print(ds["test_error"].sel(shape=shapes[0]).values)
print("converged members:", int(res.converged.sum()), "/", res.converged.size)

# %% [markdown]
# ## Reading the directory without ibflow
# The same numbers, from the files alone (numpy + json).

# %%
meta = json.loads((OUT / "sweep.json").read_text())
with np.load(OUT / "results.npz") as arrays:
    print(sorted(arrays.files))
    assert all(np.array_equal(arrays[key], value, equal_nan=True) for key, value in maps.items())
    assert np.array_equal(arrays["axis_scale"], scales)
print(
    meta["versions"],
    meta["platform"],
    "lockstep efficiency",
    round(meta["lockstep_efficiency"], 3),
)

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
ext = (np.log10(scales[0]), np.log10(scales[-1]), shapes[0], shapes[-1])
for ax, (key, value) in zip(axes, maps.items()):
    im = ax.imshow(np.log10(value).T, origin="lower", aspect="auto", extent=ext)
    ax.set_title("log10 " + key)
    ax.set_xlabel("log10 α")
    ax.set_ylabel("s")
    fig.colorbar(im, ax=ax)
plt.show()

# %% [markdown]
# ## Slices
# The limit depends on (α, s) only through k = 4α(1+s²)/(1−s²) (theory [AZ-7.1]): plotted against
# k, all curves collapse.

# %%
A, S = np.meshgrid(scales, shapes, indexing="ij")
k = 4 * A * (1 + S**2) / (1 - S**2)
test_error = maps["test_error"]
fig, ax = plt.subplots(figsize=(6, 3.8))
for j in range(0, len(shapes), max(1, len(shapes) // 5)):
    ax.loglog(k[:, j], test_error[:, j], ".-", label=f"s = {shapes[j]:.2f}")
ax.set_xlabel("k = 4α(1+s²)/(1−s²)")
ax.set_ylabel("test error")
ax.legend(fontsize=7)
plt.show()
order = np.argsort(k.ravel())
print("test error monotone in k:", bool(np.all(np.diff(test_error.ravel()[order]) > -1e-9)))
