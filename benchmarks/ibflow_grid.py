"""Comparison 3: ibflow — one flow, the vmapped grid on one device, and ``ibflow.sweep`` (the
grid with lockstep-waste reduction), each integrated to the exact limit (ibflow's default
target ``1e-24·mean(y²)/2``) — plus the profile of where the grid's time goes.

``solve_grid`` is what the headline rows use; switching the engine is the one line
``solve_grid = ...`` below.
"""

from __future__ import annotations

import functools
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow
from ibflow._reproduce.shape_scale import SWEEP_RTOL

from ._common import GD_TARGET, Problem, rel_dist, sample, time_jax

#: ibflow's default target relative to the zero predictor's loss (ibflow.integrate docstring).
EXACT_RELATIVE_TARGET = 1e-24
#: Phase-1 target / exact target: integrate switches to Kvaerno5 at 1e-8·mean(y²)/2 = 1e16 × it.
STIFF_SWITCH = 1e16
#: Evaluations of the vector field per accepted Tsit5 step (7 stages, first same as last).
TSIT5_STAGES = 6


def exact_target(y) -> float:
    return EXACT_RELATIVE_TARGET * 0.5 * float(np.mean(np.asarray(y) ** 2))


def _models(alphas, shapes, d):
    return eqx.filter_vmap(lambda a, s: ibflow.DiagonalNet.from_scale_shape(a, s, dim=d))(
        alphas, shapes)


@eqx.filter_jit
def _vmap_grid(alphas, shapes, X, y, target_loss, stiff_solver):
    def one(model):
        sol = ibflow.integrate(model, X, y, target_loss=target_loss, stiff_solver=stiff_solver,
                               throw=False)
        return dict(w=sol.predictor, steps=sol.steps, time=sol.time, loss=sol.loss,
                    status=sol.status._value)

    return jax.vmap(one)(_models(alphas, shapes, X.shape[1]))


def vmap_grid(X, y, alphas, shapes, *, target_loss=None, stiff_solver="auto"):
    """Every config in one ``jax.vmap`` over ``ibflow.integrate`` (one compiled call; members
    run in lockstep until the slowest finishes). Returns dict of arrays (configs, ...)."""
    target = exact_target(y) if target_loss is None else target_loss
    return _vmap_grid(jnp.asarray(alphas), jnp.asarray(shapes), jnp.asarray(X), jnp.asarray(y),
                      jnp.asarray(target, dtype=float), stiff_solver)


class _ShapeScaleDiagonal(eqx.Module):
    """Sweep ``build`` (shape-major grid). A module, compared by value, so repeated sweeps reuse
    one compilation (a fresh lambda per call would recompile)."""

    dim: int = eqx.field(static=True)

    def __call__(self, shape, scale):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=self.dim)


def sweep_grid(X, y, alphas, shapes, *, target_loss=None, stiff_solver="auto"):
    """The same grid through ``ibflow.sweep`` (members ordered by predicted cost and chunked,
    so each chunk's lockstep waits for a similar slowest member), with the reproductions' path
    tolerance ``SWEEP_RTOL``: the reduced flow's limit does not depend on the path error, and
    the distance column checks it against argmin Q."""
    target = exact_target(y) if target_loss is None else target_loss
    return sweep_with(X, y, alphas, shapes, target_loss=target, stiff_solver=stiff_solver,
                      rtol=SWEEP_RTOL, atol=SWEEP_RTOL * 1e-4)


def sweep_with(X, y, alphas, shapes, **options):
    """``ibflow.sweep`` over the shape-major grid of (`alphas`, `shapes`) with `options` passed
    to ``integrate`` (none: the defaults a user gets). Returns per-member arrays in grid order
    (w, steps, time, loss, status) and the sweep's lockstep efficiency."""
    grid = ibflow.Grid(shape=np.unique(shapes), scale=np.unique(alphas))
    members = grid.members()
    if not (np.array_equal(members["shape"], shapes) and np.array_equal(members["scale"], alphas)):
        raise ValueError("the members must be the shape-major cartesian grid")
    res = ibflow.sweep(_ShapeScaleDiagonal(X.shape[1]), grid, (jnp.asarray(X), jnp.asarray(y)),
                       references=(), progress=False, **options)
    out = {k: np.asarray(res[src]).reshape((grid.size,) + np.shape(res[src])[2:])
           for k, src in dict(w="predictor", steps="steps", time="time", loss="loss",
                              status="status").items()}
    out["lockstep_efficiency"] = res.metadata["lockstep_efficiency"]
    out["chunk_size"] = res.metadata["config"]["chunk_size"]
    return out


# The engine behind the headline "grid" rows and the targets (one-line switch):
solve_grid = sweep_grid if hasattr(ibflow, "sweep") else vmap_grid


@eqx.filter_jit
def _single(alpha, shape, X, y, target_loss):
    model = ibflow.DiagonalNet.from_scale_shape(alpha, shape, dim=X.shape[1])
    sol = ibflow.integrate(model, X, y, target_loss=target_loss, throw=False)
    return dict(w=sol.predictor, steps=sol.steps, time=sol.time, loss=sol.loss,
                status=sol.status._value)


def single(X, y, alpha, shape, *, target_loss=None):
    """One flow, jitted (compiles once for all configs of one problem size)."""
    target = exact_target(y) if target_loss is None else target_loss
    return _single(jnp.asarray(alpha, dtype=float), jnp.asarray(shape, dtype=float),
                   jnp.asarray(X), jnp.asarray(y), jnp.asarray(target, dtype=float))


# ---------------------------------------------------------------------------------------------
# The reduced vector field (docs/theory §2.3) alone, for the profile and the roofline.
# ---------------------------------------------------------------------------------------------


def vector_field_flops(n: int, d: int) -> int:
    """Floating-point operations of one evaluation of ``ν̇ = −(2/n)(X(P e^ρ − N e^{−ρ}) − y)``,
    ``ρ = Xᵀν``, for one member: two matrix-vector products (2nd each), 2 exponentials,
    3 ops for ``P e^ρ − N e^{−ρ}`` per coordinate (exp counted as one op), 2 per equation."""
    return 4 * n * d + 5 * d + 2 * n


def newton_iteration_flops(n: int, d: int, batch: int = 1) -> int:
    """A lower bound on the floating-point operations of one iteration of the default tail
    (`ibflow.EquilibriumNewton`) for one member of a vmapped batch of `batch` members: the
    closed-form Jacobian ``X diag(P e^ρ + N e^{−ρ}) Xᵀ`` (2n²d as a product; n(n+1)d, the
    upper triangle only, from the pair table that batches of at least `PAIR_TABLE_BATCH`
    members use when it is small enough, `DiagonalReducedDynamics.newton_table`; plus its
    ``ρ = Xᵀν``, 2nd), its Cholesky factorization (n³/3), the two triangular solves of the
    Newton direction (2n²) and one trial evaluation of the loss and vector field
    (`vector_field_flops`). Chord steps and step halvings are not counted."""
    from ibflow._dynamics.diagonal import PAIR_TABLE_BATCH, PAIR_TABLE_BYTES

    pairs = n * (n + 1) // 2
    table = batch >= PAIR_TABLE_BATCH and pairs * d * 8 <= PAIR_TABLE_BYTES
    jacobian = 2 * pairs * d if table else 2 * n * n * d
    return jacobian + 2 * n * d + n**3 // 3 + 2 * n * n + vector_field_flops(n, d)


def _batched_vector_field(nu, P, N, X, y):
    # nu: (B, n), P, N: (B, d). Same operations as ibflow's DiagonalReducedDynamics, batched.
    rho = nu @ X
    w = P * jnp.exp(rho) - N * jnp.exp(-rho)
    return -(2.0 / X.shape[0]) * (w @ X.T - y)


@functools.partial(jax.jit, static_argnums=5)
def _chained_vector_fields(nu, P, N, X, y, count):
    # `count` dependent evaluations in one compiled loop, so dispatch overhead is not timed.
    def body(_, nu):
        return nu + 1e-12 * _batched_vector_field(nu, P, N, X, y)

    return jax.lax.fori_loop(0, count, body, nu)


def vector_field_seconds(X, y, batch: int, *, count: int = 200, runs: int = 3) -> float:
    """Median time of one batched vector-field evaluation for `batch` members (timed as
    `count` chained evaluations inside one compiled loop)."""
    n, d = X.shape
    nu = 1e-3 * jax.random.normal(jax.random.key(0), (batch, n))
    P = jnp.full((batch, d), 0.1)
    X, y = jnp.asarray(X), jnp.asarray(y)
    t = time_jax(lambda: _chained_vector_fields(nu, P, P, X, y, count), runs=runs)
    return t.run_s / count


def run(p: Problem, reference: np.ndarray, *, runs: int):
    """Time one flow (on sampled configs), the vmapped grid, and the sweep; profile the grid.
    Returns a dict of measurements (see benchmarks.__main__ for the rows built from it)."""
    X, y = p.X, p.y
    out = {}
    # --- the grid to the exact limit ---------------------------------------------------------
    t = time_jax(lambda: vmap_grid(X, y, p.alphas, p.shapes), runs=min(runs, 2))
    res = {k: np.asarray(v) for k, v in t.result.items()}
    out["vmap"] = dict(timing=t, steps=res["steps"], dist=rel_dist(res["w"], reference),
                       converged=int((res["status"] == 0).sum()), time=res["time"])
    if hasattr(ibflow, "sweep"):
        # Compiled once (first call); later calls reuse it. time_jax reports compile apart.
        t = time_jax(lambda: sweep_grid(X, y, p.alphas, p.shapes),
                     runs=0 if p.quick else min(runs, 2))
        res = t.result
        out["sweep"] = dict(timing=t, steps=np.asarray(res["steps"]),
                            dist=rel_dist(res["w"], reference),
                            converged=int((np.asarray(res["status"]) == 0).sum()),
                            lockstep_efficiency=res["lockstep_efficiency"])
    # --- the grid with default options (what `ibflow.sweep` and `ibflow reproduce` do) -------
    t = time_jax(lambda: sweep_with(X, y, p.alphas, p.shapes), runs=1 if p.quick else 5)
    res = t.result
    out["default"] = dict(timing=t, steps=res["steps"], dist=rel_dist(res["w"], reference),
                          converged=int((res["status"] == 0).sum()),
                          chunk_size=res["chunk_size"])
    # --- the grid to GD's loss (1e-10), explicit solver only: gives the flow time T_i that
    # predicts the GD loop's iteration count, and ibflow's time at GD's tolerance ------------
    t = time_jax(lambda: vmap_grid(X, y, p.alphas, p.shapes, target_loss=GD_TARGET,
                                   stiff_solver=None), runs=0)
    res = {k: np.asarray(v) for k, v in t.result.items()}
    out["vmap_gd_target"] = dict(timing=t, steps=res["steps"], time=res["time"],
                                 dist=rel_dist(res["w"], reference),
                                 converged=int((res["status"] == 0).sum()))
    # --- single flows, on a sample of configs --------------------------------------------------
    idx = sample(p.size, 4 if p.quick else 5)
    first = time.perf_counter()
    jax.block_until_ready(single(X, y, p.alphas[idx[0]], p.shapes[idx[0]]))
    compile_s = time.perf_counter() - first
    per, steps, dists = [], [], []
    for i in idx:
        ti = time_jax(lambda i=i: single(X, y, p.alphas[i], p.shapes[i]), runs=runs)
        per.append(ti.run_s)
        steps.append(int(ti.result["steps"]))
        dists.append(float(rel_dist(ti.result["w"], reference[i])))
    out["single"] = dict(index=idx, run_s=np.asarray(per), compile_s=compile_s,
                         steps=np.asarray(steps), dist=np.asarray(dists))
    # --- profile: phase 1 (explicit Tsit5 until L ≤ 1e-8·mean(y²)/2, the switch) alone -------
    t1 = time_jax(lambda: vmap_grid(X, y, p.alphas, p.shapes,
                                    target_loss=STIFF_SWITCH * exact_target(y),
                                    stiff_solver=None), runs=0)
    steps1 = np.asarray(t1.result["steps"])
    vf = vector_field_seconds(X, y, p.size)
    out["profile"] = dict(phase1_s=t1.run_s, phase1_steps=steps1, vector_field_batch_s=vf,
                          vector_field_flops=vector_field_flops(p.n, p.d))
    return out
