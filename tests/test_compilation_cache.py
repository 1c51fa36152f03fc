"""The persistent compilation cache (ibflow/_cache.py): a second process finds the first one's
compiled executables. No timing assertions: hits are counted with JAX's own monitoring events."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax

from ibflow import _cache

ROOT = Path(__file__).resolve().parents[1]


def _probe(env):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cache_probe", "--d", "12", "--n", "4"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _env(**kw):
    env = {k: v for k, v in os.environ.items()
           if k not in ("IBFLOW_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME")}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env | kw


def test_second_process_hits_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _probe(_env(IBFLOW_CACHE_DIR=str(cache)))
    assert first["cache_dir"] == str(cache) and first["converged"]
    assert first["hits"] == 0 and first["misses"] >= 1  # the integrate solve was written
    assert "jit_solve" in first["written_modules"], first
    assert any(p.name.startswith("jit_solve") for p in cache.iterdir())
    second = _probe(_env(IBFLOW_CACHE_DIR=str(cache)))
    # The solve was loaded from the cache, not compiled again. (Small helper compilations near
    # the 0.05 s write threshold may be written by either process.)
    assert second["hits"] >= 1 and "jit_solve" in second["hit_modules"], second
    assert "jit_solve" not in second["written_modules"]
    assert second["loss"] == first["loss"]  # the loaded executable computes the same numbers


def _cache_dir_after_import(env):
    """The compilation cache directory a fresh process has after ``import ibflow`` and the first
    use of a public name (the setting is made then; nothing needs compiling to read it)."""
    code = ("import ibflow, jax, json; ibflow.integrate; "
            "print(json.dumps(jax.config.jax_compilation_cache_dir))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cache_location_and_opt_out(tmp_path):
    # XDG default, off switch, and a user's own JAX setting that ibflow must not override.
    xdg = _cache_dir_after_import(_env(XDG_CACHE_HOME=str(tmp_path / "xdg")))
    assert xdg == str(tmp_path / "xdg" / "ibflow" / "jax") and Path(xdg).is_dir()
    off = _cache_dir_after_import(_env(IBFLOW_CACHE_DIR="off",
                                       XDG_CACHE_HOME=str(tmp_path / "xdg2")))
    assert off is None and not (tmp_path / "xdg2").exists()
    own = _cache_dir_after_import(_env(IBFLOW_CACHE_DIR=str(tmp_path / "ib"),
                                       JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine")))
    assert own == str(tmp_path / "mine") and not (tmp_path / "ib").exists()


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("IBFLOW_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _cache.cache_dir_from_environment() == tmp_path / "ibflow" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _cache.cache_dir_from_environment() == Path.home() / ".cache" / "ibflow" / "jax"
    for off in ("", "off", "OFF", " none "):
        monkeypatch.setenv("IBFLOW_CACHE_DIR", off)
        assert _cache.cache_dir_from_environment() is None
    monkeypatch.setenv("IBFLOW_CACHE_DIR", str(tmp_path / "c"))
    assert _cache.cache_dir_from_environment() == tmp_path / "c"
    # Already configured in this process (by import ibflow or the user): left as it is.
    assert _cache.enable_compilation_cache() == jax.config.jax_compilation_cache_dir or (
        jax.config.jax_compilation_cache_dir is None)


SWEEP = """
import jax, jax.numpy as jnp, ibflow
X = jax.random.normal(jax.random.key(0), (3, 6)); y = jnp.array([1.0, -0.5, 0.2])
build = lambda scale, shape: ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=6)
res = ibflow.sweep(build, ibflow.Grid(scale=[0.1, 0.3], shape=[0.0]), (X, y), progress=False,
                   references=())
assert res.converged.all()
"""


def test_sweep_program_is_written_to_the_cache(tmp_path):
    """The sweep's batch holds no host callback (its runtime checks are traced as NaN), so its
    compiled program is stored; JAX would skip it ("uses host callbacks") otherwise."""
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-c", SWEEP], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=_env(IBFLOW_CACHE_DIR=str(cache)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert any(p.name.startswith("jit__integrate_batch") for p in cache.iterdir()), sorted(
        p.name for p in cache.iterdir())


# ----------------------------------------------------------------------------------------------
# Persistent caches key on content: a second process never reuses a program that reads a value
# the first process had otherwise (a trace cache keyed on source files' modification times
# once did).

CONSTANT_SCRIPT = """
import json, os
import jax, jax.numpy as jnp, numpy as np
import ibflow

K = float(os.environ["IBFLOW_TEST_K"])  # a module-level constant set from the environment
X = jax.random.normal(jax.random.key(0), (3, 6)); y = jnp.array([1.0, -0.5, 0.2])


def build(scale):
    return ibflow.DiagonalNet.from_scale_shape(scale * K, 0.0, dim=6)


res = ibflow.sweep(build, ibflow.Grid(scale=[0.1, 0.3]), (X, y), progress=False,
                   references=(), chunk_size=2, stiff_solver=None, target_loss=1e-10)
print(json.dumps({"parameters": np.asarray(res["parameters"]).tolist(),
                  "status": np.asarray(res["status"]).tolist()}))
"""


def _run_script(path, **env):
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=_env(**env))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_with_another_module_constant_computes_its_own_results(tmp_path):
    """The same script, file and cache directory, a module constant read from the environment
    differs: the second process's results are its own (those of a run with the cache off), not
    the first process's."""
    cache, script = tmp_path / "cache", tmp_path / "study.py"
    script.write_text(CONSTANT_SCRIPT)
    first = _run_script(script, IBFLOW_CACHE_DIR=str(cache), IBFLOW_TEST_K="1")
    second = _run_script(script, IBFLOW_CACHE_DIR=str(cache), IBFLOW_TEST_K="4")
    alone = _run_script(script, IBFLOW_CACHE_DIR="off", IBFLOW_TEST_K="4")
    assert second == alone
    assert second["parameters"] != first["parameters"]
