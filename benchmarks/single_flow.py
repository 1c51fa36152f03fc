"""Issue 2's timing: one flow on the Figure 7.1 problem (d = 1000, n = 100, α = 1e-5, s = 0), to
loss 1e-10 and to the exact default target; compile and run times reported apart.

    python -m benchmarks.single_flow
"""

import time

import jax
import numpy as np

import ibflow


def main() -> None:
    data = ibflow.data.sparse_regression(jax.random.key(1993), n=100, d=1000)
    model = ibflow.DiagonalNet.from_scale_shape(1e-5, 0.0, dim=1000)
    for label, options in (("loss < 1e-10", {"target_loss": 1e-10}), ("exact target", {})):
        start = time.perf_counter()
        sol = jax.block_until_ready(ibflow.integrate(model, data.X, data.y, **options))
        first = time.perf_counter() - start
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            sol = jax.block_until_ready(ibflow.integrate(model, data.X, data.y, **options))
            runs.append(time.perf_counter() - start)
        print(f"{label}: first call (compile + run) {first:.2f} s, run median of 5 "
              f"{np.median(runs):.3f} s, steps {int(sol.steps)}, loss {float(sol.loss):.2e}, "
              f"{ibflow.Status[sol.status]}")


if __name__ == "__main__":
    main()
