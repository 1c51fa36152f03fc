"""The code base is ruff-clean (the rules are in pyproject.toml's ``[tool.ruff]``)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "ibflow", "tests", "notebooks", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
