"""Generates 01_quickstart.ipynb (run: python notebooks/_make_01.py)."""

import nbformat as nbf

cells = [
    nbf.v4.new_markdown_cell(
        "# ibflow quickstart\n\nIntegrate gradient flow of a diagonal linear network *exactly* "
        "to its limit point, watch the loss fall through the plateau of a small "
        "initialization, and see where the limit lands between the min-ℓ1 and min-ℓ2 "
        "interpolants (THEORY §2.3)."),
    nbf.v4.new_code_cell(
        "import os\n\nimport jax\nimport jax.numpy as jnp\nimport matplotlib.pyplot as plt\n"
        "import numpy as np\n\nimport ibflow\n\n"
        "SMALL = os.environ.get('IBFLOW_SMALL') == '1'\n"
        "n, d = (20, 100) if SMALL else (100, 1000)\n"
        "data = ibflow.data.sparse_regression(jax.random.key(0), n=n, d=d, k=5, noise=0.1)\n"
        "data.X.shape, data.y.shape"),
    nbf.v4.new_markdown_cell(
        "## One flow\nScale α = 1e-4, balanced shape s = 0. `integrate` stops when the loss "
        "reaches its target (an event), not at a guessed horizon; `save_at` records the "
        "trajectory."),
    nbf.v4.new_code_cell(
        "model = ibflow.DiagonalNet.from_scale_shape(1e-4, 0.0, dim=d)\n"
        "ts = jnp.logspace(-1, 5, 200)\n"
        "sol = ibflow.integrate(model, data.X, data.y, save_at=ts)\n"
        "print(ibflow.Status[sol.status], '| final loss', float(sol.loss), '| steps', "
        "int(sol.steps), '| time', float(sol.time))"),
    nbf.v4.new_code_cell(
        "fig, ax = plt.subplots(figsize=(6, 3.5))\n"
        "ok = np.isfinite(sol.trajectory.loss)\n"
        "ax.loglog(ts[ok], sol.trajectory.loss[ok])\n"
        "ax.set_xlabel('time t'); ax.set_ylabel('training loss'); "
        "ax.set_title('plateau, escape, exponential convergence')\nplt.show()"),
    nbf.v4.new_markdown_cell(
        "## Where did it land?\nCompare the limit with the minimum-ℓ1 interpolant (LP) and the "
        "minimum-ℓ2 interpolant; at small α the limit is close to ℓ1 (rich regime)."),
    nbf.v4.new_code_cell(
        "w = np.asarray(sol.predictor)\n"
        "w_l1 = ibflow.min_l1_interpolant(data.X, data.y)\n"
        "w_l2 = np.asarray(ibflow.min_l2_interpolant(data.X, data.y))\n"
        "rel = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)\n"
        "print(f'distance to min-l1 {rel(w, w_l1):.3g}, to min-l2 {rel(w, w_l2):.3g}, '\n"
        "      f'test error {float(data.test_error(w)):.4g}')\n"
        "fig, ax = plt.subplots(figsize=(7, 3.5))\n"
        "idx = np.arange(d)\n"
        "ax.plot(idx, w_l2, '.', ms=3, label='min-ℓ2', alpha=0.6)\n"
        "ax.plot(idx, w_l1, 'o', ms=5, mfc='none', label='min-ℓ1')\n"
        "ax.plot(idx, w, 'x', ms=4, label='flow limit (α = 1e-4)')\n"
        "ax.set_xlabel('coordinate'); ax.set_ylabel('weight'); ax.legend(); plt.show()"),
    nbf.v4.new_markdown_cell(
        "## Scale moves the limit\nSame problem, a few scales in one vmapped call "
        "(one compilation)."),
    nbf.v4.new_code_cell(
        "import equinox as eqx\n"
        "scales = jnp.logspace(-5, 0, 4 if SMALL else 8)\n"
        "models = eqx.filter_vmap(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.0, dim=d))"
        "(scales)\n"
        "sols = eqx.filter_vmap(lambda m: ibflow.integrate(m, data.X, data.y, throw=False))"
        "(models)\n"
        "d1 = [rel(np.asarray(p), w_l1) for p in sols.predictor]\n"
        "d2 = [rel(np.asarray(p), w_l2) for p in sols.predictor]\n"
        "fig, ax = plt.subplots(figsize=(6, 3.5))\n"
        "ax.semilogx(scales, d1, 'o-', label='to min-ℓ1'); "
        "ax.semilogx(scales, d2, 's-', label='to min-ℓ2')\n"
        "ax.set_xlabel('scale α'); ax.set_ylabel('relative distance'); ax.legend(); plt.show()"),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {
    "name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, __file__.replace("_make_01.py", "01_quickstart.ipynb"))
