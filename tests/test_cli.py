"""The command line, in process: exit codes (0 ok, 1 runtime failure, 2 usage, 3 not
converged), one-line usage errors, fail-soft references, --json and --out."""

import json
import sys

import numpy as np
import pytest

import ibflow
from ibflow._cli import main
from ibflow._reproduce import REPRODUCTIONS
from ibflow._reproduce.registry import Reproduction


def test_flow_reports_limit(capsys):
    code = main(["flow", "--n", "10", "--d", "40", "--k", "3", "--scale", "1e-3", "--json"])
    out = capsys.readouterr().out
    report = json.loads(out)  # only JSON on stdout
    assert code == 0 and report["converged"] and report["status_name"] == "converged"
    assert report["final_loss"] <= report["target_loss"]
    assert report["reference_errors"] == {} and report["trustworthy"]
    # α = 1e-3 is in the rich regime: closer to min-ℓ1 than to min-ℓ2.
    assert report["rel_distance_to_min_l1"] < report["rel_distance_to_min_l2"]
    # The diagonal net's limit is the theory's minimizer (Theorem 1), computed independently.
    assert report["rel_distance_to_theory"] < 1e-8


def test_flow_summary_is_short(capsys):
    code = main(["flow", "--n", "10", "--d", "40", "--k", "3"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.strip().splitlines()
    assert 5 <= len(lines) <= 10
    assert lines[1].split()[:2] == ["status", "converged:"]
    assert any(line.startswith("distance") and "to min-ℓ1" in line for line in lines)


def test_flow_not_converged_exits_3(capsys):
    code = main(["flow", "--n", "10", "--d", "40", "--max-steps", "1"])
    captured = capsys.readouterr()
    assert code == 3
    assert "budget ran out" in captured.out and captured.err == ""


def test_flow_keeps_result_when_references_fail(capsys):
    # n > d: no interpolant exists, so min-ℓ1/ℓ2 and the theory's minimizer all fail, but the
    # flow's result is still printed, each failed reference as an error string.
    code = main(["flow", "--n", "12", "--d", "6", "--k", "2", "--max-steps", "300", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 3 and not report["converged"]
    assert np.isfinite(report["final_loss"]) and report["steps"] > 0
    assert report["rel_distance_to_min_l1"] is None
    assert set(report["reference_errors"]) == {"min_l1", "min_l2", "theory"}
    assert "n <= d" in report["reference_errors"]["min_l2"]


def test_huge_scale_is_flagged_not_trustworthy(capsys):
    # α = 1e30: u₊v₊ − u₋v₋ cancels terms of size 1e30, so the predictor is rounding noise.
    code = main(["flow", "--scale", "1e30", "--n", "4", "--d", "8", "--k", "2", "--max-steps",
                 "100", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 3 and not report["trustworthy"]
    assert report["roundoff_loss_floor"] > 1e20 * report["target_loss"]


@pytest.mark.parametrize("argv, fragment", [
    (["--max-steps", "0"], "--max-steps"),
    (["--max-steps", "1.5"], "--max-steps"),
    (["--scale", "-1"], "--scale"),
    (["--scale", "nan"], "--scale"),
    (["--scale", "inf"], "--scale"),
    (["--shape", "1"], "--shape"),
    (["--slope", "0"], "--slope"),
    (["--n", "0"], "--n"),
    (["--d", "-3"], "--d"),
    (["--noise", "-0.1"], "--noise"),
    (["--rtol", "0"], "--rtol"),
    (["--target-loss", "abc"], "--target-loss"),
    (["--k", "50", "--d", "20"], "--k 50 exceeds --d 20"),
    (["--width", "2"], "--width applies to --model fc"),
    (["--model", "cnn"], "--model"),
    (["--bogus"], "--bogus"),
    (["--seed", "99999999999999999999"], "--seed"),  # was an OverflowError (exit 1)
    (["--seed", "-1"], "--seed"),
    (["--noise", "1e200"], "--noise"),  # was blamed on target_loss, an option never given
])
def test_usage_errors_exit_2_with_one_line(capsys, argv, fragment):
    code = main(["flow", *argv])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in captured.err


def test_runtime_failure_exits_1(capsys, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ibflow, "integrate", boom)
    code = main(["flow", "--n", "4", "--d", "8", "--k", "2"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.strip().splitlines() == [
        "ibflow flow: failed: RuntimeError: disk on fire (set IBFLOW_TRACEBACK=1 for the "
        "traceback)"]


def _fake_reproduction(monkeypatch, seen=None):
    def run(out, full, progress):
        (out / "figure.txt").write_text("data")
        if seen is not None:
            seen.append(progress)
        return {"value": 1.5, "worst": float("inf")}

    monkeypatch.setitem(REPRODUCTIONS, "fake", Reproduction("fake", "a test double", run))


def test_reproduce_out_is_the_output_directory(tmp_path, monkeypatch, capsys):
    _fake_reproduction(monkeypatch)
    out = tmp_path / "results"
    assert main(["reproduce", "fake", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (out / "figure.txt").read_text() == "data"  # directly in DIR, not DIR/fake/
    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["output"] == str(out) and summary["value"] == 1.5
    assert not (out / "fake").exists()
    # Default: ./ibflow-results/NAME.
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fake"]) == 0
    assert (tmp_path / "ibflow-results" / "fake" / "figure.txt").is_file()
    assert "ibflow-results/fake" in capsys.readouterr().out


def test_reproduce_summary_is_strict_json(tmp_path, monkeypatch, capsys):
    _fake_reproduction(monkeypatch)
    assert main(["reproduce", "fake", "--out", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out, parse_constant=_reject)
    assert summary["worst"] == "inf"
    assert json.loads((tmp_path / "summary.json").read_text(), parse_constant=_reject) == summary


def test_reproduce_progress_flag_reaches_the_reproduction(tmp_path, monkeypatch):
    """Every command has --progress/--no-progress; the default follows stderr (bars only on a
    terminal: piped to a file, no sweep bar)."""
    seen = []
    _fake_reproduction(monkeypatch, seen)
    for tty in (True, False):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty)
        for flag in ([], ["--no-progress"], ["--progress"]):
            assert main(["reproduce", "fake", "--out", str(tmp_path), *flag]) == 0
    assert seen == [True, False, True, False, False, True]


def test_reproduce_list_and_unknown(capsys):
    assert main(["reproduce", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "shape-scale" in listing
    # Each reproduction's line gives its default run time (or "?" where none is recorded).
    for name, r in REPRODUCTIONS.items():
        line = next(line for line in listing.splitlines() if line.startswith(name + " "))
        assert ("~" in line) == (r.seconds is not None)
    assert main(["reproduce", "no-such-figure"]) == 2
    assert "unknown reproduction" in capsys.readouterr().err
    assert main(["reproduce"]) == 2


def test_help_exits_cleanly(capsys):
    assert main(["--help"]) == 0
    assert "Exit codes" in capsys.readouterr().out
    assert main([]) == 2  # a sub-command is required
    assert main(["flow", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--json" in text
    # Defaults are shown, computed ones in words.
    for fragment in ("initialization scale α > 0 (default: 0.001)", "(default: 100000)",
                     "(default: diagonal)", "(default: 1e-24 × mean(y²)/2)",
                     "default: on when stderr is a terminal"):
        assert fragment in text


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ibflow {ibflow.__version__}"


def _reject(constant):
    raise ValueError(f"not strict JSON: {constant}")


def test_json_is_strict_for_non_finite_numbers(capsys):
    """α = 1e300 overflows: the record holds non-finite numbers, written as strings (strict
    JSON), not as the bare Infinity/NaN that JSON parsers other than Python's refuse."""
    code = main(["flow", "--scale", "1e300", "--n", "4", "--d", "8", "--k", "2", "--max-steps",
                 "50", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out, parse_constant=_reject)
    assert code == 3 and not report["converged"] and not report["trustworthy"]
    assert report["roundoff_loss_floor"] in ("inf", "nan")
    assert captured.err == ""


def test_newton_limit_is_reported_at_infinite_time(capsys):
    """The default diagonal flow ends with Newton on the equilibrium equation: its limit is
    reached at t = ∞, which --json reports as "inf" (it said 0.0)."""
    code = main(["flow", "--n", "10", "--d", "40", "--k", "3", "--json"])
    report = json.loads(capsys.readouterr().out, parse_constant=_reject)
    assert code == 0 and report["time"] == "inf"
    assert main(["flow", "--n", "10", "--d", "40", "--k", "3"]) == 0
    assert "t = ∞" in capsys.readouterr().out


def test_json_mode_writes_only_json_to_stdout_in_a_real_process():
    # At the file-descriptor level (XLA or import-time output would land here too), as
    # `ibflow flow --json | python -m json.tool` sees it.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from ibflow._cli import main; sys.exit(main())",
         "flow", "--n", "4", "--d", "8", "--k", "2", "--max-steps", "2", "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["status_name"] == "budget_exhausted"
    assert "Traceback" not in proc.stderr


def test_progress_is_on_by_default_on_a_terminal_only(monkeypatch):
    """Issue 16: `ibflow flow` shows progress by default when stderr is a terminal, not
    otherwise; --progress / --no-progress override."""
    from ibflow import _cli

    seen = []
    monkeypatch.setattr(_cli, "_run_flow", lambda args: seen.append(args.progress) or 0)
    for tty in (True, False):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty)
        assert main(["flow"]) == 0
        assert main(["flow", "--no-progress"]) == 0
        assert main(["flow", "--progress"]) == 0
    assert seen == [True, False, True, False, False, True]


def test_flow_progress_goes_to_stderr_and_json_stays_clean():
    """With --progress and --json, stdout is exactly one JSON object while the loss-decade bar
    goes to stderr; without a terminal and without the flag there is no bar."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-c", "import sys; from ibflow._cli import main; sys.exit(main())",
           "flow", "--n", "8", "--d", "30", "--k", "2"]
    piped = subprocess.run(cmd + ["--progress", "--json"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert piped.returncode == 0, piped.stderr
    record = json.loads(piped.stdout)
    assert record["status_name"] == "converged"
    assert "decades" in piped.stderr
    quiet = subprocess.run(cmd + ["--json"], capture_output=True, text=True, env=env,
                           timeout=300)
    assert "decades" not in quiet.stderr  # not a terminal: no bar by default
