"""Smoke test of ``python -m benchmarks``: every benchmark runs once at tiny size (``--quick``)
and the table, CSV and JSON come out with finite numbers. Timings are not asserted."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMERIC = ("compile_s", "run_s", "per_config_s", "dist")


def test_benchmarks_quick(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    md = (tmp_path / "latest.md").read_text()
    assert md.strip() in proc.stdout  # the printed table is the written one
    with open(tmp_path / "latest.csv") as f:
        rows = list(csv.DictReader(f))
    data = json.loads((tmp_path / "latest.json").read_text())
    assert len(data["rows"]) == len(rows) and data["machine"]["cores"] >= 1
    sections = {r["section"] for r in rows}
    assert {"0", "1", "2", "3", "3p", "4", "5", "6", "T"} <= sections
    for r in rows:
        for col in NUMERIC:
            if r[col] != "":
                assert math.isfinite(float(r[col])) and float(r[col]) >= 0, (r["row"], col)
    # every timed row has a run time; every ibflow grid row converged with a distance to argmin Q
    timed = [r for r in rows if r["section"] in {"1", "2", "3", "4"} and "pending" not in r["note"]]
    assert all(r["run_s"] != "" for r in timed)
    grid = [r for r in rows if r["section"] == "3" and "exact limit" in r["row"]]
    assert grid and all(float(r["dist"]) < 1e-8 for r in grid)
    # every target row has a finite ratio, and a verdict where it states a threshold, unless its
    # input is unavailable
    for r in rows:
        if r["section"] == "T" and "no GPU" not in r["note"] and "not run" not in r["note"]:
            assert math.isfinite(float(r["value"])), r
            if r["target"][:1] in {"≥", "≤"}:
                assert r["pass"] in {"True", "False"}, r
