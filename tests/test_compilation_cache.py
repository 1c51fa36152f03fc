"""The persistent compilation cache (ibflow/_cache.py): a second process finds the first one's
compiled executables. No timing assertions: hits are counted with JAX's own monitoring events."""

import json
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
    """The compilation cache directory a fresh process has after ``import ibflow`` (the setting
    is made at import; nothing needs compiling to read it)."""
    code = "import ibflow, jax, json; print(json.dumps(jax.config.jax_compilation_cache_dir))"
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
# Traced programs kept across processes (ibflow/_trace_cache.py)

SWEEP_SCRIPT = """
import json, sys
import equinox as eqx, jax, jax.numpy as jnp, numpy as np
import ibflow
from ibflow import _trace_cache
from ibflow._sweep.executor import _integrate_batch

exports = []
_export = _trace_cache._export
_trace_cache._export = lambda *a: exports.append(a[0] is _integrate_batch) or _export(*a)
X = jax.random.normal(jax.random.key(0), (3, 6)); y = jnp.array([1.0, -0.5, 0.2])


def build(scale, shape):
    return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=6)


res = ibflow.sweep(build, ibflow.Grid(scale=[0.1, 0.3], shape=[0.0, 0.5]), (X, y),
                   progress=False, references=(), chunk_size=2)
print(json.dumps({"exports": sum(exports), "traces": eqx.debug.get_num_traces(_integrate_batch),
                  "predictor": np.asarray(res["predictor"]).tolist(),
                  "status": np.asarray(res["status"]).tolist()}))
"""


def _run_script(path, cache):
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=_env(IBFLOW_CACHE_DIR=str(cache)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_skips_tracing_the_sweep(tmp_path):
    """Issue 14: the first process exports the sweep's traced batch; a second process with the
    same code loads it (no trace of `_integrate_batch`, no export) and computes the same numbers;
    editing the script (the user's code) changes the key, so the program is traced again."""
    from ibflow._trace_cache import SUBDIR

    cache, script = tmp_path / "cache", tmp_path / "study.py"
    script.write_text(SWEEP_SCRIPT)
    first = _run_script(script, cache)
    assert first["exports"] == 1 and first["traces"] == 1
    # Two artifacts: the batch and the cost order's program.
    assert len(list((cache / SUBDIR).glob("*.exported"))) == 2
    second = _run_script(script, cache)
    assert second["exports"] == 0 and second["traces"] == 0, second
    assert second["predictor"] == first["predictor"] and second["status"] == first["status"]
    script.write_text(SWEEP_SCRIPT + "\n# edited: the build could have changed\n")
    third = _run_script(script, cache)
    assert third["exports"] == 1 and third["traces"] == 1
    assert third["predictor"] == first["predictor"]
    assert len(list((cache / SUBDIR).glob("*.exported"))) == 4


def _scaled(scale, x):
    return scale * jnp.sin(x)


class _Scaled(eqx.Module):
    c: np.ndarray = eqx.field(static=True)  # a constant of the traced program

    def __call__(self, s, x):
        return s * jnp.asarray(self.c) * x


class _Opaque:  # no fingerprint: a call bound to it must not be cached
    def __init__(self, c):
        self.c = c


def test_trace_cache_keys_on_code_and_refuses_what_it_cannot_fingerprint(tmp_path, monkeypatch):
    import jax.numpy as jnp

    from ibflow import _trace_cache

    def cache(fn, *bound):
        tc = _trace_cache.TraceCache("test", fn, *bound)
        tc.folder = tmp_path  # the suite runs with the compilation cache off
        return tc

    monkeypatch.setattr(_trace_cache, "_loaded", {})
    x = jnp.linspace(0.0, 1.0, 5)
    apply = lambda f, x: f(2.0, x)  # noqa: E731
    assert bool(jnp.all(cache(apply, _scaled)(x) == _scaled(2.0, x)))
    assert len(list(tmp_path.glob("*.exported"))) == 1
    # Loaded from disk in a "new process" (memory cleared), not exported again.
    monkeypatch.setattr(_trace_cache, "_loaded", {})
    monkeypatch.setattr(_trace_cache, "_export", lambda *a: pytest.fail("exported again"))
    assert bool(jnp.all(cache(apply, _scaled)(x) == _scaled(2.0, x)))
    monkeypatch.undo()
    # Two lambdas share a qualified name but not their code: two artifacts, right numbers.
    monkeypatch.setattr(_trace_cache, "_loaded", {})
    first, second = (lambda s, x: s * x), (lambda s, x: s + x)
    assert bool(jnp.all(cache(apply, first)(x) == 2.0 * x))
    assert bool(jnp.all(cache(apply, second)(x) == 2.0 + x))
    assert len(list(tmp_path.glob("*.exported"))) == 3
    # Arrays in static fields are constants of the program: keyed by value, not by shape.
    with pytest.warns(UserWarning, match="static"):
        two, three = _Scaled(np.full(5, 2.0)), _Scaled(np.full(5, 3.0))
    assert bool(jnp.all(cache(apply, two)(x) == 4.0 * x))
    assert bool(jnp.all(cache(apply, three)(x) == 6.0 * x))
    assert len(list(tmp_path.glob("*.exported"))) == 5
    # An object it cannot fingerprint: computed, never written.
    opaque = cache(lambda o, x: o.c * x, _Opaque(3.0))
    assert opaque._base_key() is False
    assert bool(jnp.all(opaque(x) == 3.0 * x))
    assert len(list(tmp_path.glob("*.exported"))) == 5


def test_trace_cache_keys_on_the_platform_of_the_arrays(tmp_path, monkeypatch):
    # A program exported for one platform cannot run on another: a sweep on
    # jax.devices("cpu") in a process whose default backend is a GPU once loaded the GPU's
    # program ("exported for platforms ('cuda',) but it is used on ('cpu',)").
    import jax
    import jax.numpy as jnp

    from ibflow import _trace_cache

    assert _trace_cache._platform([jnp.zeros(2)]) == "cpu"
    assert _trace_cache._platform([np.zeros(2)]) == jax.export.default_export_platform()
    monkeypatch.setattr(_trace_cache, "_loaded", {})
    x = jnp.linspace(0.0, 1.0, 5)
    apply = lambda f, x: f(2.0, x)  # noqa: E731
    tc = _trace_cache.TraceCache("test platform", apply, _scaled)
    tc.folder = tmp_path
    assert bool(jnp.all(tc(x) == _scaled(2.0, x)))
    (path,) = tmp_path.glob("*.exported")
    assert jax.export.deserialize(bytearray(path.read_bytes())).platforms == ("cpu",)
    # The same call from arrays on another platform: another key, exported for that platform.
    exported = []

    def fake_export(fn, static, treedef, leaves, path, platform):
        exported.append(platform)
        return lambda *leaves: _scaled(2.0, leaves[-1])

    monkeypatch.setattr(_trace_cache, "_platform", lambda leaves: "cuda")
    monkeypatch.setattr(_trace_cache, "_export", fake_export)
    assert bool(jnp.all(tc(x) == _scaled(2.0, x)))
    assert exported == ["cuda"]
