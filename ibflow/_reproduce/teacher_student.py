"""The authors' ReLU teacher–student experiment (THEORY §2.8: d = N = 5, m = 10, α = 1, s = 0.5,
teacher s = 0.3) with `TwoLayerNet`: the flow's limit, its status, and the cosine distance of
its final parameters to gradient descent's endpoint at a small step. GD is the only reference:
no theorem covers multi-neuron ReLU networks (THEORY §2.6)."""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optax  # noqa: E402

from .._activations.relu import ReLU  # noqa: E402
from .._discrete import descend  # noqa: E402
from .._integrate import integrate  # noqa: E402
from .._models.two_layer import TwoLayerNet  # noqa: E402
from .._status import STATUS_NAMES  # noqa: E402
from .registry import register  # noqa: E402

D, N, WIDTH, ALPHA, SHAPE, TEACHER_SHAPE = 5, 5, 10, 1.0, 0.5, 0.3
GD_STEP = 1e-3


def _problem(seed):
    kx, kt, ks = jax.random.split(jax.random.key(seed), 3)
    X = jax.random.normal(kx, (N, D))
    teacher = TwoLayerNet.from_scale_shape(ALPHA, TEACHER_SHAPE, dim=D, width=WIDTH,
                                           activation=ReLU(), key=kt)
    student = TwoLayerNet.from_scale_shape(ALPHA, SHAPE, dim=D, width=WIDTH, activation=ReLU(),
                                           key=ks)
    return X, jax.vmap(teacher)(X), student


def _flat(model):
    return jnp.concatenate([jnp.ravel(a) for a in
                            jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))])


def _cosine_distance(a, b):
    return 1.0 - jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))


def run_seed(seed, *, gd_steps, max_steps):
    X, y, student = _problem(seed)
    sol = integrate(student, X, y, throw=False, max_steps=max_steps)
    gd = descend(student, X, y, optimizer=optax.sgd(GD_STEP), num_steps=gd_steps)
    return {
        "seed": int(seed), "status": STATUS_NAMES[int(sol.status._value)],
        "flow_loss": float(sol.loss), "flow_steps": int(sol.steps),
        "gd_loss": float(gd.loss), "gd_steps": gd_steps,
        "cosine_distance_flow_gd": float(_cosine_distance(_flat(sol.model), _flat(gd.model))),
    }


@register("teacher-student", help="ReLU teacher–student (THEORY §2.8): flow limit vs GD endpoint")
def run_teacher_student(out: Path, full: bool) -> dict:
    seeds = range(8 if full else 3)
    gd_steps = 400_000 if full else 100_000
    rows = [run_seed(s, gd_steps=gd_steps, max_steps=100_000 if full else 20_000) for s in seeds]
    out.mkdir(parents=True, exist_ok=True)
    (out / "teacher_student.json").write_text(json.dumps(rows, indent=2))
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
