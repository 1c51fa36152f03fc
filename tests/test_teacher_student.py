"""`ibflow reproduce teacher-student` at its default setting (~20 s): what it writes is checked
against facts recomputed from its own data file, not against its reported numbers."""

import json

import numpy as np

from ibflow._cli import main

#: `integrate`'s documented default target: 1e-24 · mean(y²)/2.
RELATIVE_TARGET = 1e-24


def test_teacher_student_writes_its_limit(tmp_path, capsys):
    out = tmp_path / "ts"
    assert main(["reproduce", "teacher-student", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert json.loads((out / "summary.json").read_text()) == summary
    with np.load(out / "teacher_student.npz") as npz:
        data = dict(npz)
    rows = summary["runs"]
    assert [r["seed"] for r in rows] == data["seeds"].tolist()
    assert [r["status"] for r in rows] == data["status"].tolist()
    # Every run of the default converges: the ReLU flow is followed through its kinks (seeds 0
    # and 1 reach one; before the kink integrator they ran out of budget there).
    assert summary["converged"] == len(summary["runs"]) == 3
    assert summary["converged"] == sum(r["status"] == "converged" for r in rows)
    for i, row in enumerate(rows):
        X, y = data["X"][i], data["y"][i]
        first, second = data["flow_first"][i], data["flow_second"][i]
        outputs = data["flow_outputs"][i]
        # The written parameters are the written outputs' model (ReLU, no bias).
        np.testing.assert_allclose(np.maximum(X @ first.T, 0.0) @ second, outputs,
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(row["limit"]["first"], first)
        np.testing.assert_array_equal(row["limit"]["second"], second)
        np.testing.assert_array_equal(row["limit"]["outputs"], outputs)
        target = RELATIVE_TARGET * 0.5 * np.mean(y**2)
        np.testing.assert_allclose(data["target_loss"][i], target, rtol=1e-12)
        loss = 0.5 * np.mean((outputs - y) ** 2)
        # Converged exactly when the recomputed loss is at or below the target.
        assert (row["status"] == "converged") == (loss <= target), (row["status"], loss, target)
        np.testing.assert_allclose(row["flow_loss"], loss, rtol=1e-2)  # ulps of the outputs
        flow = np.concatenate([first.ravel(), second])
        gd = np.concatenate([data["gd_first"][i].ravel(), data["gd_second"][i]])
        cosine = 1.0 - flow @ gd / (np.linalg.norm(flow) * np.linalg.norm(gd))
        np.testing.assert_allclose(row["cosine_distance_flow_gd"], cosine, rtol=1e-9, atol=1e-14)
        gd_loss = 0.5 * np.mean((data["gd_outputs"][i] - y) ** 2)
        np.testing.assert_allclose(row["gd_loss"], gd_loss, rtol=1e-2)
    converged = [r["cosine_distance_flow_gd"] for r in rows if r["status"] == "converged"]
    assert summary["max_cosine_distance_converged"] == max(converged)
