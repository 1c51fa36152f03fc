"""Registry of ``ibflow reproduce NAME`` reproductions.

A reproduction is a function ``run(out: Path, full: bool, progress: bool) -> dict``: it writes a
PNG and the data behind it (``.npz``/``.json``) directly in ``out`` (`output_dir` decides which
folder), shows progress bars on stderr only where ``progress`` is true, and returns a small
JSON-serializable summary (the numbers a reader checks). ``full=True`` uses the paper's
settings.

The table below is static, so that ``ibflow reproduce --list`` (and a misspelt name) is
answered without importing JAX: a reproduction's module is imported only to run it.
"""

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path

Runner = Callable[[Path, bool, bool], dict]


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """`name`, one line of `help`, where the runner is (``module:function`` under
    ``ibflow._reproduce``, or the runner itself) and `seconds`: the default run's wall time on
    the project's 2-core CPU, compilation included (`timing` says where the number comes
    from)."""

    name: str
    help: str
    runner: str | Runner
    seconds: float | None = None
    timing: str = ""

    def run(self, out: Path, full: bool, progress: bool = False) -> dict:
        runner = self.runner
        if isinstance(runner, str):
            module, function = runner.split(":")
            runner = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        return runner(out, full, progress)


def _table(*entries: Reproduction) -> dict[str, Reproduction]:
    return {r.name: r for r in entries}


#: Every reproduction. Times: ``ibflow reproduce NAME --no-progress`` with default settings, a
#: fresh process and an empty output folder on the project's 2-core CPU (shared with other work,
#: so a rough guide), compilation included; `timing` says where each number comes from (None:
#: no time known yet).
REPRODUCTIONS: dict[str, Reproduction] = _table(
    Reproduction("stable-rank", "Stable rank and margin spread vs time for the init-σ grid: "
                 "Gaussian mixture (leaky ReLU, ReLU) and digits (docs/theory §4).",
                 "stable_rank:run", 61, "2-core Xeon, 2026-12-05, empty cache"),
    Reproduction("mirror-relu", "Liang–Montúfar Fig. 1: ReLU nets, unscaled mirror potentials "
                 "vs the variational problem [LM-G]; L∞ error vs width; GF on shifted labels.",
                 "mirror:mirror_relu", 58, "2-core CPU, 2026-11-29, empty cache"),
    Reproduction("mirror-abs", "Liang–Montúfar Fig. 2: |·| nets, width-scaled potentials vs the "
                 "Bregman variational problem [LM-B]; L∞ error vs width; |h''| distributions.",
                 "mirror:mirror_abs", 29,
                 "2-core CPU, 2026-11-29, empty cache"),
    Reproduction("shape-scale", "Figure 7.1: population error vs scale α for five shapes s",
                 "shape_scale:run_shape_scale", 21.5, "2-core CPU"),
    Reproduction("shape-scale-map", "dense α × s map of test error and of the ℓ1↔ℓ2 position",
                 "shape_scale:run_shape_scale_map"),
    Reproduction("q-landscape", "Figure 7.2: contours of the single-neuron regularizer Q "
                 "(d = 2)", "q_figures:run_q_landscape", 3.3, "2-core CPU"),
    Reproduction("q-vs-flow", "distance between the flow's trajectory and argmin Q over time",
                 "q_figures:run_q_vs_flow", 38.8, "2-core CPU"),
    Reproduction("optimize-shape", "learned per-coordinate init shapes vs balanced vs best "
                 "uniform (diagonal net)", "optimize_shape:run_optimize_shape", 29.8,
                 "2-core CPU"),
    Reproduction("teacher-student", "ReLU teacher–student (docs/theory §2.8): flow limit vs GD "
                 "endpoint", "teacher_student:run_teacher_student", 41, "2-core CPU"),
)


#: Parent of the default output directories (``ibflow-results/NAME``).
DEFAULT_ROOT = Path("ibflow-results")


def output_dir(name: str, out: str | Path | None = None) -> Path:
    """Where reproduction `name` writes its files: `out` itself when given (the files go
    directly in it, not in a sub-folder), else ``ibflow-results/NAME``."""
    return DEFAULT_ROOT / name if out is None else Path(out)
