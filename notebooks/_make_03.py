"""Generates 03_regimes.ipynb (run: python notebooks/_make_03.py)."""

import nbformat as nbf

cells = [
    nbf.v4.new_markdown_cell(
        "# Regime map from a saved sweep\n\nA sweep writes an open results directory "
        "(`results.npz` + `sweep.json`, readable without ibflow). This notebook runs a small "
        "α × s sweep (or reuses the directory if it exists — re-running resumes) and explores "
        "it: test error, distance to min-ℓ1 / min-ℓ2, and slices through the map."),
    nbf.v4.new_code_cell(
        "import json, os\nfrom pathlib import Path\n\nimport jax\nimport matplotlib.pyplot as plt\n"
        "import numpy as np\n\nimport ibflow\n\n"
        "SMALL = os.environ.get('IBFLOW_SMALL') == '1'\n"
        "OUT = Path(os.environ.get('IBFLOW_RESULTS', 'ibflow-results/regimes'))\n"
        "n, d, size = (16, 80, 5) if SMALL else (100, 1000, 24)\n"
        "data = ibflow.data.sparse_regression(jax.random.key(1993), n=n, d=d, k=5)\n"
        "grid = ibflow.Grid(scale=np.logspace(-5, 0, size), shape=np.linspace(0, 0.99, size))\n"
        "res = ibflow.sweep(lambda scale, shape: ibflow.DiagonalNet.from_scale_shape(scale, shape, "
        "dim=d), grid, data, out=OUT, rtol=1e-6, atol=1e-10, progress=False)\nres"),
    nbf.v4.new_markdown_cell("## Reading the directory without ibflow"),
    nbf.v4.new_code_cell(
        "meta = json.loads((OUT / 'sweep.json').read_text())\n"
        "arrays = np.load(OUT / 'results.npz')\n"
        "print(sorted(arrays.files))\nprint(meta['versions'], meta['platform'], "
        "'lockstep efficiency', round(meta['lockstep_efficiency'], 3))"),
    nbf.v4.new_code_cell(
        "scales, shapes = arrays['axis_scale'], arrays['axis_shape']\n"
        "fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))\n"
        "ext = (np.log10(scales[0]), np.log10(scales[-1]), shapes[0], shapes[-1])\n"
        "for ax, key in zip(axes, ['test_error', 'distance_min_l1', 'distance_min_l2']):\n"
        "    im = ax.imshow(np.log10(arrays[key]).T, origin='lower', aspect='auto', extent=ext)\n"
        "    ax.set_title('log10 ' + key); ax.set_xlabel('log10 α'); ax.set_ylabel('s')\n"
        "    fig.colorbar(im, ax=ax)\nplt.show()"),
    nbf.v4.new_markdown_cell(
        "## Slices\nThe limit depends on (α, s) only through k = 4α(1+s²)/(1−s²) "
        "(THEORY [AZ-7.1]): plotted against k, all curves collapse."),
    nbf.v4.new_code_cell(
        "A, S = np.meshgrid(scales, shapes, indexing='ij')\n"
        "k = 4 * A * (1 + S**2) / (1 - S**2)\n"
        "fig, ax = plt.subplots(figsize=(6, 3.8))\n"
        "for j in range(0, len(shapes), max(1, len(shapes) // 5)):\n"
        "    ax.loglog(k[:, j], arrays['test_error'][:, j], '.-', label=f's = {shapes[j]:.2f}')\n"
        "ax.set_xlabel('k = 4α(1+s²)/(1−s²)'); ax.set_ylabel('test error'); ax.legend(fontsize=7)\n"
        "plt.show()\n"
        "order = np.argsort(k.ravel())\n"
        "print('test error monotone in k:', bool(np.all(np.diff(arrays['test_error'].ravel()"
        "[order]) > -1e-9)))"),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {
    "name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, __file__.replace("_make_03.py", "03_regimes.ipynb"))
