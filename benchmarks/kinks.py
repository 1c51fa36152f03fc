"""Issue 13, item 2: exact kinked flows vs the researcher's workaround, side by side.

``python -m benchmarks.kinks [--quick]``

Problems: THEORY §8.2's sliding setting (leaky neuron, γ = 0.3, n = 8, d = 30, α = 1, s = 0,
mixed-sign realizable targets); only problems on which the flow slides (``KinkReport.slides >
0``) are kept. For each:

- ibflow: `integrate_kinked` to the default target; compile time and the median run time.
- GD+R: full-batch GD with steps ``η₀, η₀/2, η₀/4, …`` run to the same loss target, and the
  Richardson extrapolation ``2w(η/2) − w(η)`` (THEORY §8.2, "Independent reference"). Its time
  to reach 1e-7 relative agreement with ibflow's limit is the wall time of all GD runs up to
  the first halving that gets there (a researcher does not know in advance which η suffices).

Prints one markdown table with the agreement, both times and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp

import ibflow
from ibflow._kinks import integrate_kinked

GAMMA, N, D, ALPHA, SHAPE = 0.3, 8, 30, 1.0, 0.0
AGREEMENT = 1e-7


def problem(key):
    kx, km, kt = jax.random.split(key, 3)
    X = jax.random.normal(kx, (N, D))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(ALPHA, SHAPE, dim=D, slope=GAMMA, key=km)
    sign = jnp.sign(m.a)
    z = X @ jax.random.normal(kt, (D,)) / jnp.sqrt(D)
    y = sign * jnp.where(sign * z >= 0, sign * z, GAMMA * sign * z)
    return m, X, y


@eqx.filter_jit
def gd(model, X, y, lr, target, max_iters):
    """Full-batch GD on ``L = ½ mean((f − y)²)`` until ``L ≤ target`` (or `max_iters`)."""
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(p, static))(X) - y) ** 2)

    def cond(c):
        p, it, value = c
        return (value > target) & (it < max_iters) & jnp.isfinite(value)

    def body(c):
        p, it, _ = c
        value, g = jax.value_and_grad(loss)(p)
        p = jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
        return p, it + 1, value

    p, it, value = jax.lax.while_loop(cond, body, (params, jnp.array(0), loss(params)))
    return eqx.combine(p, static).predictor(), it, value


def _timed(fn, repeats):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    run = statistics.median(times)
    return out, max(first - run, 0.0), run


def compare(key, *, max_halvings, max_iters, repeats):
    model, X, y = problem(key)
    (sol, report), compile_s, ibflow_s = _timed(
        lambda: integrate_kinked(model, X, y, throw=False), repeats)
    if not bool(sol.converged) or int(report.slides) == 0:
        return None
    w_ib = sol.predictor
    # GD step: a fraction of 2/λ_max with λ_max ≈ (a² + ‖w‖²)·‖X‖²/n along the path.
    size = max(float(model.a**2 + jnp.sum(model.w**2)),
               float(sol.model.a**2 + jnp.sum(sol.model.w**2)))
    lr = jnp.asarray(0.5) / (size * float(jnp.linalg.norm(X, 2) ** 2) / N)
    target = sol.target_loss
    max_iters = jnp.asarray(max_iters)
    jax.block_until_ready(gd(model, X, y, lr, target, jnp.asarray(10)))  # compile
    total, previous, rows = 0.0, None, []
    for k in range(max_halvings + 1):
        t = time.perf_counter()
        w, iters, value = jax.block_until_ready(gd(model, X, y, lr / 2**k, target, max_iters))
        total += time.perf_counter() - t
        err_gd = float(jnp.linalg.norm(w - w_ib) / jnp.linalg.norm(w_ib))
        err_r = (None if previous is None else
                 float(jnp.linalg.norm(2 * w - previous - w_ib) / jnp.linalg.norm(w_ib)))
        rows.append((float(lr) / 2**k, int(iters), float(value), err_gd, err_r, total))
        previous = w
        if err_r is not None and err_r <= AGREEMENT:
            break
    return dict(switches=int(report.switches), slides=int(report.slides),
                sliding_time=float(report.sliding_time), compile_s=compile_s,
                ibflow_s=ibflow_s, rows=rows)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--problems", type=int, default=6)
    args = parser.parse_args(argv)
    max_halvings = 6 if args.quick else 12
    max_iters = 10**6 if args.quick else 10**8
    print(f"leaky neuron γ = {GAMMA}, n = {N}, d = {D}, α = {ALPHA}, s = {SHAPE}; sliding cases "
          f"only; agreement target {AGREEMENT:g}\n")
    print("| seed | switches | slides | t sliding | ibflow compile s | ibflow run s | "
          "GD+R halvings | GD+R vs ibflow | GD alone vs ibflow | GD+R s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in range(args.problems):
        out = compare(jax.random.key(seed), max_halvings=max_halvings, max_iters=max_iters,
                      repeats=3 if args.quick else 5)
        if out is None:
            continue
        last = out["rows"][-1]
        reached = last[4] is not None and last[4] <= AGREEMENT
        print(f"| {seed} | {out['switches']} | {out['slides']} | {out['sliding_time']:.3g} | "
              f"{out['compile_s']:.1f} | {out['ibflow_s']:.4f} | {len(out['rows']) - 1} | "
              f"{last[4]:.2e} | {last[3]:.2e} | {last[5]:.2f}{'' if reached else ' (not reached)'}"
              f" | {last[5] / out['ibflow_s']:.0f}× |")
        for lr, iters, value, err_gd, err_r, total in out["rows"]:
            print(f"|  | η = {lr:.3g} | {iters} iters | loss {value:.1e} | | | | "
                  f"{'' if err_r is None else f'{err_r:.2e}'} | {err_gd:.2e} | {total:.2f} | |")


if __name__ == "__main__":
    main()
