"""Registry of ``ibflow reproduce NAME`` reproductions.

A reproduction is a function ``run(out: Path, full: bool) -> dict``: it writes a PNG and the data
behind it (``.npz``/``.json``) directly in ``out`` (`output_dir` decides which folder) and returns
a small JSON-serializable summary (the numbers a reader checks). The default (``full=False``)
finishes in ≤ 1–2 minutes on a 2-core CPU; ``full=True`` uses the paper's settings.
"""

import dataclasses
from collections.abc import Callable
from pathlib import Path

Runner = Callable[[Path, bool], dict]


@dataclasses.dataclass(frozen=True)
class Reproduction:
    name: str
    help: str
    run: Runner


REPRODUCTIONS: dict[str, Reproduction] = {}


def register(name: str, help: str) -> Callable[[Runner], Runner]:
    def decorator(run: Runner) -> Runner:
        if name in REPRODUCTIONS:
            raise ValueError(f"reproduction {name!r} registered twice")
        REPRODUCTIONS[name] = Reproduction(name, help, run)
        return run

    return decorator


#: Parent of the default output directories (``ibflow-results/NAME``).
DEFAULT_ROOT = Path("ibflow-results")


def output_dir(name: str, out: str | Path | None = None) -> Path:
    """Where reproduction `name` writes its files: `out` itself when given (the files go
    directly in it, not in a sub-folder), else ``ibflow-results/NAME``."""
    return DEFAULT_ROOT / name if out is None else Path(out)
