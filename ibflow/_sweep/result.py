"""What a sweep returns (and what ``SweepResult.load`` reads back from a results directory)."""

import json
from pathlib import Path

import numpy as np

from .._solution import Status

STATUS_NAMES = ("converged", "budget_exhausted", "nonfinite", "solver_failed")


def status_code(name: str) -> int:
    return int(getattr(Status, name)._value)


class SweepResult:
    """Per-member results in grid order.

    - ``fields``: name → array of shape ``grid_shape`` (+ trailing dims, e.g. ``(d,)`` for
      ``predictor``). Always: ``loss``, ``steps``, ``status`` (int codes, see ``status_names``),
      ``time``; with test data ``test_error``; ``distance_<ref>`` relative distances to reference
      predictors (``min_l1``, ``min_l2``, ``theory``) where available.
    - ``axes``: the grid axes (name → values), in order.
    - ``metadata``: the ``sweep.json`` contents.
    """

    def __init__(self, fields: dict[str, np.ndarray], axes: dict[str, np.ndarray],
                 metadata: dict):
        self.fields, self.axes, self.metadata = fields, axes, metadata

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    @property
    def status_names(self) -> dict[int, str]:
        return {status_code(n): n for n in STATUS_NAMES}

    @property
    def converged(self) -> np.ndarray:
        return self.fields["status"] == status_code("converged")

    @classmethod
    def load(cls, out: str | Path) -> "SweepResult":
        """Read a finished results directory (``results.npz`` + ``sweep.json``)."""
        out = Path(out)
        metadata = json.loads((out / "sweep.json").read_text())
        with np.load(out / "results.npz") as f:
            arrays = {k: f[k] for k in f.files}
        axes = {name: arrays.pop(f"axis_{name}") for name in metadata["config"]["axes"]}
        return cls(arrays, axes, metadata)

    def __repr__(self) -> str:
        axes = ", ".join(f"{k}[{len(v)}]" for k, v in self.axes.items())
        return (f"SweepResult({axes}; fields={sorted(self.fields)}; "
                f"converged {int(self.converged.sum())}/{self.converged.size})")
