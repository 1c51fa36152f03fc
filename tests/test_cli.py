"""The command line, in process."""

import json

import pytest

from ibflow._cli import main


def test_flow_reports_limit(capsys):
    code = main(["flow", "--n", "10", "--d", "40", "--k", "3", "--scale", "1e-3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["converged"]
    assert report["final_loss"] <= report["target_loss"]
    # α = 1e-3 is in the rich regime: much closer to min-ℓ1 than to min-ℓ2.
    assert report["rel_distance_to_min_l1"] < report["rel_distance_to_min_l2"]


def test_flow_budget_exhausted_exits_nonzero(capsys):
    code = main(["flow", "--n", "10", "--d", "40", "--max-steps", "1"])
    assert code == 1
    assert "budget ran out" in capsys.readouterr().out


def test_reproduce_list_and_unknown(capsys):
    assert main(["reproduce", "--list"]) == 0
    assert "shape-scale" in capsys.readouterr().out
    assert main(["reproduce", "no-such-figure"]) == 2


def test_help_exits_cleanly():
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
