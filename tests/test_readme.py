"""README.md teaches: it stays short, carries no development log, and every ```python block in it
runs as written, each in a fresh interpreter (imports and data included)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)


def test_readme_is_a_short_guide():
    assert len(README.encode()) <= 20_000
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", README), "a date in the README"
    assert not re.search(r"\bissues? #?\d+", README, flags=re.I), "an issue reference"
    assert len(BLOCKS) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, tmp_path):
    result = subprocess.run([sys.executable, "-c", BLOCKS[index]], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"block {index}:\n{BLOCKS[index]}\n{result.stderr[-3000:]}"
