"""The authors' ReLU teacher–student experiment ([THEORY §2.8][theory-2-8]: d = N = 5, m = 10, α =
1, s = 0.5, teacher s = 0.3) with `TwoLayerNet`: the flow's limit, its status, and the cosine
distance of
its final parameters to gradient descent's endpoint at a small step. GD is the only reference:
no theorem covers multi-neuron ReLU networks ([THEORY §2.6][theory-2-6]).

Files: ``teacher_student.json`` (one row per seed: status, losses, cosine distance and the limit
itself: the flow's final parameters and its outputs on the training inputs),
``teacher_student.npz`` (per seed, stacked on a leading axis: the data ``X``, ``y``, the flow's
``flow_first`` (m, d), ``flow_second`` (m,), ``flow_outputs`` (N,), its ``target_loss``, and
GD's endpoint ``gd_first``, ``gd_second``, ``gd_outputs``) and ``teacher_student.png``."""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optax  # noqa: E402

import ibflow  # noqa: E402

# Private, for want of a public equivalent: the progress bar over seeds, and status names.
from .. import _progress  # noqa: E402
from .._status import STATUS_NAMES  # noqa: E402

D, N, WIDTH, ALPHA, SHAPE, TEACHER_SHAPE = 5, 5, 10, 1.0, 0.5, 0.3
GD_STEP = 1e-3


def _problem(seed):
    kx, kt, ks = jax.random.split(jax.random.key(seed), 3)
    X = jax.random.normal(kx, (N, D))
    teacher = ibflow.TwoLayerNet.from_scale_shape(ALPHA, TEACHER_SHAPE, dim=D, width=WIDTH,
                                                  activation=ibflow.ReLU(), key=kt)
    student = ibflow.TwoLayerNet.from_scale_shape(ALPHA, SHAPE, dim=D, width=WIDTH,
                                                  activation=ibflow.ReLU(), key=ks)
    return X, jax.vmap(teacher)(X), student


def _flat(model):
    return jnp.concatenate([jnp.ravel(a) for a in
                            jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))])


def _cosine_distance(a, b):
    return 1.0 - jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))


def _endpoint(model, X):
    """The trained layers of `model` (the student has no bias) and its outputs on `X`."""
    return {"first": np.asarray(model.first), "second": np.asarray(model.second),
            "outputs": np.asarray(jax.vmap(model)(X))}


def run_seed(seed, *, gd_steps, max_steps):
    """One seed: the summary row and the arrays behind it (data, flow limit, GD endpoint)."""
    X, y, student = _problem(seed)
    sol = ibflow.integrate(student, X, y, throw=False, max_steps=max_steps)
    gd = ibflow.descend(student, X, y, optimizer=optax.sgd(GD_STEP), num_steps=gd_steps)
    flow_end, gd_end = _endpoint(sol.model, X), _endpoint(gd.model, X)
    row = {
        "seed": int(seed), "status": STATUS_NAMES[int(sol.status._value)],
        "flow_loss": float(sol.loss), "target_loss": float(sol.target_loss),
        "flow_steps": int(sol.steps), "gd_loss": float(gd.loss), "gd_steps": gd_steps,
        "cosine_distance_flow_gd": float(_cosine_distance(_flat(sol.model), _flat(gd.model))),
        "limit": {name: value.tolist() for name, value in flow_end.items()},
    }
    arrays = {"X": np.asarray(X), "y": np.asarray(y), "target_loss": np.asarray(sol.target_loss),
              **{f"flow_{name}": value for name, value in flow_end.items()},
              **{f"gd_{name}": value for name, value in gd_end.items()}}
    return row, arrays


def run_teacher_student(out: Path, full: bool, progress: bool = False) -> dict:
    seeds = range(8 if full else 3)
    gd_steps = 400_000 if full else 100_000
    if progress:
        _progress.compiling("the flow and gradient descent")
    bar = _progress.bar(len(seeds), desc="teacher-student: seeds", unit="seed",
                        progress=progress)
    runs = []
    for s in seeds:
        runs.append(run_seed(s, gd_steps=gd_steps, max_steps=100_000 if full else 20_000))
        bar.update(1)
    bar.close()
    rows = [row for row, _ in runs]
    out.mkdir(parents=True, exist_ok=True)
    (out / "teacher_student.json").write_text(json.dumps(rows, indent=2))
    np.savez(out / "teacher_student.npz", seeds=np.asarray(seeds),
             status=np.asarray([row["status"] for row in rows]),
             **{name: np.stack([arrays[name] for _, arrays in runs]) for name in runs[0][1]})
    fig, ax = plt.subplots(figsize=(6, 3.5))
    colors = ["tab:green" if r["status"] == "converged" else "tab:red" for r in rows]
    ax.bar([str(r["seed"]) for r in rows],
           [max(r["cosine_distance_flow_gd"], 1e-17) for r in rows], color=colors)
    ax.set_yscale("log")
    ax.set_xlabel("seed (green: flow converged, red: not — see the JSON for its status)")
    ax.set_ylabel("cosine distance, flow vs GD (η = 1e-3)")
    ax.set_title("ReLU teacher–student, d = N = 5, m = 10, α = 1, s = 0.5")
    fig.tight_layout()
    fig.savefig(out / "teacher_student.png", dpi=120)
    plt.close(fig)
    converged = [r for r in rows if r["status"] == "converged"]
    return {"runs": rows, "converged": len(converged), "of": len(rows),
            "max_cosine_distance_converged": max((r["cosine_distance_flow_gd"]
                                                  for r in converged), default=None)}
