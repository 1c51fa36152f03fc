"""Comparison 5: how the vmapped ibflow grid scales with the number of configurations and with
the dimension d (CPU), and compile time vs grid size. GPU rows only when JAX sees a GPU.

Configurations are drawn from the Figure 7.1 grid (tiled when more than 100 are needed), so
every batch has the same mix of easy and hard members.
"""

from __future__ import annotations

import jax
import numpy as np

import ibflow

from ._common import SEED, grid, sample, time_jax
from .ibflow_grid import vmap_grid


def _configs(count: int):
    alphas, shapes = grid(5, 20)
    idx = sample(100, count) if count <= 100 else np.resize(np.arange(100), count)
    return alphas[idx], shapes[idx]


def run(config_sizes, config_problem, dims, dim_configs: int, n_for_dims: int, *, runs: int):
    """Returns dict(configs=[...], dims=[...]); one entry per measured size (the GPU rows are
    `benchmarks.gpu`'s)."""
    out = {"configs": [], "dims": []}
    d, n = config_problem
    data = ibflow.data.sparse_regression(jax.random.key(SEED), n=n, d=d)
    for count in config_sizes:
        a, s = _configs(count)
        t = time_jax(lambda a=a, s=s: vmap_grid(data.X, data.y, a, s), runs=runs)
        steps = np.asarray(t.result["steps"])
        out["configs"].append(dict(count=count, d=d, n=n, timing=t, steps_mean=steps.mean(),
                                   steps_max=steps.max(),
                                   converged=int((np.asarray(t.result["status"]) == 0).sum())))
    a, s = _configs(dim_configs)
    for dim in dims:
        data = ibflow.data.sparse_regression(jax.random.key(SEED), n=n_for_dims, d=dim)
        t = time_jax(lambda data=data: vmap_grid(data.X, data.y, a, s), runs=runs)
        steps = np.asarray(t.result["steps"])
        out["dims"].append(dict(count=dim_configs, d=dim, n=n_for_dims, timing=t,
                                steps_mean=steps.mean(), steps_max=steps.max(),
                                converged=int((np.asarray(t.result["status"]) == 0).sum())))
    return out
