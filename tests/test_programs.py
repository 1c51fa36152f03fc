"""Traced solves kept across processes (ibflow/_programs.py): a second process with the same
configuration reads the first one's exported program instead of tracing, computes the same
numbers, and never reads a program for code that no version pins (a model class of the user's).
The suite's own processes run with ibflow's cache off (conftest), so these tests run scripts in
fresh processes with a temporary cache directory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import ibflow
from ibflow import _engine, _programs

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, os, sys
import jax, jax.flatten_util, jax.numpy as jnp, numpy as np
import equinox as eqx
import ibflow
from ibflow import _engine

d = int(os.environ.get("IBFLOW_TEST_D", "6"))
X = jax.random.normal(jax.random.key(0), (3, d)); y = jnp.array([1.0, -0.5, 0.2])


class Mine(eqx.Module):  # a user's model: its code is pinned by no version
    w: jax.Array

    def __call__(self, x):
        return jnp.dot(self.w, x)


if os.environ.get("IBFLOW_TEST_MODEL") == "mine":
    model = Mine(w=0.1 * jnp.ones(d))
else:
    model = ibflow.DiagonalNet.from_scale_shape(0.1, 0.3, dim=d)
sol = ibflow.integrate(model, X, y)
flat = jax.flatten_util.ravel_pytree(sol.model)[0]
print(json.dumps({"parameters": [float(v) for v in flat], "loss": float(sol.loss),
                  "steps": int(sol.steps), "status": int(sol.status._value),
                  "traced": len(_engine._RESULTS)}))
"""


def _run(tmp_path, cache, **env):
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    full = {k: v for k, v in os.environ.items()
            if k not in ("IBFLOW_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME")}
    full |= {"JAX_PLATFORMS": "cpu", "IBFLOW_CACHE_DIR": str(cache),
             "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=full)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _programs_in(cache):
    folder = Path(cache) / "ibflow-programs"
    return sorted(folder.glob("*" + _programs.SUFFIX)) if folder.is_dir() else []


def test_second_process_reads_the_program_and_computes_the_same(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    assert first["traced"] == 1 and first["status"] == 0
    (stored,) = _programs_in(cache)
    second = _run(tmp_path, cache)
    assert second["traced"] == 0  # the solve was not traced: its program was read
    assert second == first | {"traced": 0}  # bit for bit: the same compiled module
    # Against a process that traces and compiles the solve itself (cache off): the same limit.
    alone = _run(tmp_path, "off")
    assert alone["traced"] == 1 and alone["steps"] == first["steps"]
    assert jnp.allclose(jnp.asarray(alone["parameters"]), jnp.asarray(first["parameters"]),
                        rtol=1e-12, atol=0)
    # Another size is another configuration: its own program, its own numbers.
    other = _run(tmp_path, cache, IBFLOW_TEST_D="7")
    assert other["traced"] == 1 and len(other["parameters"]) != len(first["parameters"])
    assert len(_programs_in(cache)) == 2 and stored in _programs_in(cache)


def test_a_users_model_class_is_traced_every_time(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache, IBFLOW_TEST_MODEL="mine")
    second = _run(tmp_path, cache, IBFLOW_TEST_MODEL="mine")
    assert first["traced"] == second["traced"] == 1 and _programs_in(cache) == []
    assert second == first


def test_a_damaged_program_is_traced_again_and_rewritten(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    (stored,) = _programs_in(cache)
    stored.write_bytes(b"not a program")
    second = _run(tmp_path, cache)
    assert second == first and stored.stat().st_size > 1000
    assert _run(tmp_path, cache)["traced"] == 0


class _Users(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return self.w @ x


def _skeleton_bytes(tree):
    skeleton = _engine._Skeleton(tree)
    return _programs._dumps((skeleton.treedef, skeleton.leaves), _engine._ARRAY)


def test_configuration_key_refuses_unpinned_code():
    model = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, 0.0, dim=3, slope=0.3,
                                                    key=jax.random.key(0))
    assert _skeleton_bytes(model) == _skeleton_bytes(model)
    for unpinned in (_Users(w=jnp.ones(3)), eqx.Partial(lambda x: x), (_Users,)):
        with pytest.raises(Exception):  # noqa: B017 - _Unstable, or pickle's refusal of a lambda
            _skeleton_bytes(unpinned)


def test_result_structure_round_trips_with_equinox_markers():
    """Equinox compares its unset-field marker by identity: a program's result structure must
    read back as the same structure (the stored skeleton fills in the results)."""
    model = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, 0.0, dim=3, slope=0.3,
                                                    key=jax.random.key(0))
    skeleton = _engine._Skeleton(model)
    parts = _programs._parts(_programs._dumps((skeleton.treedef, skeleton.leaves),
                                              _engine._ARRAY), _engine._ARRAY)
    again = _engine._Skeleton.of_parts(*parts)
    assert again == skeleton
    arrays = _engine._arrays(model)
    filled = again.fill(arrays)
    assert type(filled) is type(model) and jnp.array_equal(filled.w, model.w)
