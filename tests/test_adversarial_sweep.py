"""Adversarial sweep tests: faults in the results directory, kills, concurrency, bad inputs.

Every case asserts a clear error naming the file or argument, or an honest result (a verified,
byte-identical result or a ``not_computed`` status). Problems are tiny (d = 8, n = 5, 6 members
in 3 chunks) and every in-process sweep uses one build and one set of static options, so the
whole file compiles the batch once.
"""

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

import ibflow
from ibflow._status import status_code
from ibflow._sweep import store as sweep_store

D, N = 8, 5
SCALES, SHAPES = [1e-3, 1e-2, 0.1], [0.0, 0.5]
OPTIONS = dict(chunk_size=2, progress=False, references=("min_l2",), rtol=1e-6, atol=1e-10,
               stiff_solver=None, target_loss=1e-8)
CHUNKS = [f"chunks/chunk-{i:05d}.npz" for i in range(3)]


class Diagonal(eqx.Module):
    dim: int = eqx.field(static=True)

    def __call__(self, scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=self.dim)


BUILD = Diagonal(D)


def data():
    return ibflow.data.sparse_regression(jax.random.key(11), n=N, d=D, k=2, n_test=7)


def run(out, grid=None, **kw):
    grid = grid or ibflow.Grid(scale=SCALES, shape=SHAPES)
    return ibflow.sweep(BUILD, grid, data(), out=out, **(OPTIONS | kw))


OTHER_GRID = ibflow.Grid(scale=SCALES, shape=[0.0, 0.7])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs of the sweep and of a second grid (same shapes, other values)."""
    root = tmp_path_factory.mktemp("reference")
    run(root / "main")
    run(root / "other", grid=OTHER_GRID)
    return root


def copy_of(reference, tmp_path, name="main") -> Path:
    out = tmp_path / name
    shutil.copytree(reference / name, out)
    return out


def assert_identical(out: Path, ref: Path, names=("results.npz", *CHUNKS)):
    for name in names:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


def mtimes(out: Path) -> dict[str, int]:
    return {n: (out / n).stat().st_mtime_ns for n in CHUNKS if (out / n).exists()}


# --- damaged chunks are recomputed with a warning naming the file -----------------------------

def _garbage(path, ref):
    path.write_bytes(b"\x00garbage, not a zip file" * 8)


def _truncate_half(path, ref):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _truncate_tiny(path, ref):
    path.write_bytes(path.read_bytes()[:10])


def _empty(path, ref):
    path.write_bytes(b"")


def _flip_byte(path, ref):
    # A flipped byte inside the first member's data: the zip CRC check fails.
    payload = bytearray(path.read_bytes())
    payload[120] ^= 0xFF
    path.write_bytes(bytes(payload))


def _stale(path, ref):
    shutil.copy(ref / "other" / "chunks" / path.name, path)


def _foreign(path, ref):
    other = sorted(p for p in path.parent.glob("chunk-*.npz") if p != path)[0]
    shutil.copy(other, path)


def _drop_field(path, ref):
    arrays = sweep_store.read_npz(path)
    del arrays["loss"]
    np.savez(path, **arrays)


def _wrong_length(path, ref):
    arrays = sweep_store.read_npz(path)
    arrays["loss"] = arrays["loss"][:1]
    np.savez(path, **arrays)


def _no_hash(path, ref):
    arrays = sweep_store.read_npz(path)
    del arrays["config_hash"]
    np.savez(path, **arrays)


def _permuted(path, ref):
    arrays = sweep_store.read_npz(path)
    arrays["index"] = arrays["index"][::-1].copy()
    np.savez(path, **arrays)


def _npy_not_npz(path, ref):
    np.save(path.with_suffix(".tmp.npy"), np.zeros(3))
    os.replace(path.with_suffix(".tmp.npy"), path)


DAMAGE = {"garbage": _garbage, "truncated-half": _truncate_half,
          "truncated-10-bytes": _truncate_tiny, "empty": _empty, "flipped-byte": _flip_byte,
          "stale-other-grid": _stale,
          "copied-over-another": _foreign, "missing-field": _drop_field,
          "wrong-length": _wrong_length, "no-config-hash": _no_hash,
          "permuted-index": _permuted, "npy-not-npz": _npy_not_npz}
MESSAGES = {"stale-other-grid": "another sweep", "copied-over-another": "other members",
            "permuted-index": "other members", "missing-field": "holds fields",
            "wrong-length": "shape", "no-config-hash": "no config hash"}


@pytest.mark.parametrize("chunk", [0, 2])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_chunk_is_recomputed_with_warning(reference, tmp_path, damage, chunk):
    out = copy_of(reference, tmp_path)
    path = out / CHUNKS[chunk]
    DAMAGE[damage](path, reference)
    (out / "results.npz").unlink()
    before = mtimes(out)
    with pytest.warns(UserWarning, match=rf"{path.name}.*{MESSAGES.get(damage, 'unreadable')}"):
        res = run(out)
    assert res.converged.all()
    assert_identical(out, reference / "main")
    for name, mtime in before.items():  # undamaged chunks were trusted, not recomputed
        if name != CHUNKS[chunk]:
            assert (out / name).stat().st_mtime_ns == mtime


def test_missing_chunk_is_recomputed(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / CHUNKS[1]).unlink()
    with pytest.warns(UserWarning, match="chunk-00001.npz is missing although later chunks"):
        run(out)
    assert_identical(out, reference / "main")


def test_last_chunks_missing_is_an_ordinary_resume(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / CHUNKS[2]).unlink()
    (out / "results.npz").unlink()
    run(out)  # no warning (filterwarnings = error)
    assert_identical(out, reference / "main")


def test_leftover_temporary_file_is_removed(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    tmp = out / "chunks" / ".chunk-00001.npz.abc123.tmp"
    tmp.write_bytes(b"half a chunk")
    run(out)
    assert not tmp.exists()
    assert_identical(out, reference / "main")


# --- sweep.json and results.npz ---------------------------------------------------------------

def test_deleted_metadata_chunks_verified_by_hash(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / "sweep.json").unlink()
    before = mtimes(out)
    run(out)
    assert mtimes(out) == before  # same grid: every chunk verified and reused
    assert_identical(out, reference / "main")


def test_deleted_metadata_other_grid_recomputes_every_chunk(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / "sweep.json").unlink()
    with pytest.warns(UserWarning, match="another sweep") as record:
        run(out, grid=OTHER_GRID)
    messages = [str(w.message) for w in record]
    for name in CHUNKS:
        assert sum(Path(name).name in m for m in messages) == 1, messages
    assert_identical(out, reference / "other")


def test_corrupt_metadata_is_replaced(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / "sweep.json").write_text('{"config_hash": ')
    with pytest.warns(UserWarning, match="sweep.json"):
        run(out)
    assert_identical(out, reference / "main")


def test_directory_of_another_grid_is_refused(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    with pytest.raises(ValueError, match=f"{out}.*holds a different sweep"):
        run(out, grid=OTHER_GRID)


def test_directory_of_another_grid_without_results_is_taken_over(reference, tmp_path):
    # E.g. a run that failed before its first chunk (bad option) and is re-run fixed.
    out = tmp_path / "res"
    out.mkdir()
    shutil.copy(reference / "other" / "sweep.json", out / "sweep.json")
    with pytest.warns(UserWarning, match="sweep.json describes another sweep"):
        run(out)
    assert_identical(out, reference / "main")


def test_deleted_results_are_rebuilt(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / "results.npz").unlink()
    run(out)
    assert_identical(out, reference / "main")


def test_unfinished_directory_reads_not_computed(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    (out / "results.npz").unlink()
    (out / CHUNKS[1]).unlink()
    with pytest.warns(UserWarning, match="2 of 3 chunks verified"):
        partial = ibflow.SweepResult.load(out)
    full = ibflow.SweepResult.load(reference / "main")
    missing = np.zeros(len(SCALES) * len(SHAPES), bool)
    missing[full.metadata["config"]["chunks"][1]] = True
    missing = missing.reshape(len(SCALES), len(SHAPES))
    assert (partial["status"][missing] == status_code("not_computed")).all()
    assert np.isnan(partial["loss"][missing]).all() and (partial["steps"][missing] == -1).all()
    assert np.isnan(partial["predictor"][missing]).all()
    for name in full.fields:
        np.testing.assert_array_equal(partial[name][~missing], full[name][~missing])


def test_results_of_another_sweep_are_not_trusted(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    shutil.copy(reference / "other" / "results.npz", out / "results.npz")
    loaded = ibflow.SweepResult.load(out)  # falls back to the verified chunks
    full = ibflow.SweepResult.load(reference / "main")
    for name in full.fields:
        np.testing.assert_array_equal(loaded[name], full[name])


def test_final_model_rebuilt_from_parameters(reference):
    res = ibflow.SweepResult.load(reference / "main")
    model = res.model(BUILD, scale=SCALES[1], shape=SHAPES[1])
    np.testing.assert_allclose(model.predictor(), res["predictor"][1, 1], rtol=1e-14, atol=1e-17)
    with pytest.raises(ValueError, match=r"missing \['shape'\]"):
        res.model(BUILD, scale=SCALES[1])
    with pytest.raises(ValueError, match="axis 'scale' has no value 0.5"):
        res.model(BUILD, scale=0.5, shape=0.0)


def test_open_sweep_refuses_a_non_sweep_directory(tmp_path):
    with pytest.raises(ValueError, match="not a sweep results directory"):
        ibflow.open_sweep(tmp_path)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        run(tmp_path / "res")
    finally:
        os.umask(old)
    for name in ("sweep.json", "results.npz", *CHUNKS):
        assert (tmp_path / "res" / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out=.*file.*not a directory"):
        run(tmp_path / "file")


class Teacher(eqx.Module):
    matrix: jax.Array

    def __call__(self, scale):
        return ibflow.DiagonalNet.from_scale_shape(scale, 0.0, dim=D)


def test_config_hash_sees_every_entry_of_a_large_array():
    # A repr elides the middle of a large array; the fingerprint must not.
    a, b = np.zeros(5000), np.zeros(5000)
    b[2500] = 1e-300
    assert repr(a) == repr(b)
    from ibflow._sweep.identity import describe, digest

    assert digest(describe(Teacher(a))) != digest(describe(Teacher(b)))
    assert digest(describe({"x": a})) != digest(describe({"x": b}))
    assert digest(describe({"x": a})) == digest(describe({"x": a.copy()}))


class Reversed(ibflow.AbstractOrder):
    def __call__(self, build, params, size):
        return np.arange(size)[::-1]


class NotAPermutation(ibflow.AbstractOrder):
    def __call__(self, build, params, size):
        return np.zeros(size, int)


def test_order_is_a_strategy_and_does_not_change_results():
    # Descending scales: the cost order (small scale = long plateau = most steps first) differs
    # from the grid order.
    grid = ibflow.Grid(scale=SCALES[::-1], shape=SHAPES)
    by_cost = ibflow.sweep(BUILD, grid, data(), **OPTIONS)
    assert by_cost.metadata["config"]["chunks"] == [[4, 5], [2, 3], [0, 1]]
    steps = by_cost["steps"].ravel()
    assert steps[[4, 5]].min() > steps[[2, 3]].max() > 0
    for order, chunks in [(None, [[0, 1], [2, 3], [4, 5]]), (Reversed(), [[5, 4], [3, 2], [1, 0]])]:
        other = ibflow.sweep(BUILD, grid, data(), **(OPTIONS | {"order": order}))
        assert other.metadata["config"]["chunks"] == chunks
        for name in by_cost.fields:
            np.testing.assert_allclose(other[name], by_cost[name], rtol=1e-12, err_msg=name)
    with pytest.raises(ValueError, match="order must return a permutation"):
        ibflow.sweep(BUILD, grid, data(), **(OPTIONS | {"order": NotAPermutation()}))


@pytest.mark.parametrize("scale, shape", [(1e-4, 0.0), (0.1, 0.5), (2.0, -0.9)])
def test_diagonal_cost_estimate_is_minus_log_k(scale, shape):
    # docs/theory [AZ-7.1]: the unbiased net's limit depends on k = 4α(1+s²)/(1−s²); the plateau
    # lasts ~log(1/k) e-folds.
    model = ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=3)
    k = 4 * scale * (1 + shape**2) / (1 - shape**2)
    np.testing.assert_allclose(model.estimated_cost(), -np.log(k), rtol=1e-12)


# --- several data sets ------------------------------------------------------------------------

def second_data():
    return ibflow.data.sparse_regression(jax.random.key(12), n=N, d=D, k=2, n_test=7)


def test_two_data_sets_labeled_and_equal_to_separate_sweeps(tmp_path):
    grid = ibflow.Grid(scale=SCALES, shape=SHAPES)
    both = ibflow.sweep(BUILD, grid, [data(), second_data()], out=tmp_path / "both", **OPTIONS)
    ds = ibflow.open_sweep(tmp_path / "both")
    assert ds["loss"].dims == ("dataset", "scale", "shape")
    for k, one in enumerate([data(), second_data()]):
        alone = ibflow.sweep(BUILD, grid, one, **OPTIONS)
        for name in alone.fields:
            np.testing.assert_allclose(both[name][k], alone[name], rtol=1e-12, err_msg=name)
            np.testing.assert_array_equal(ds[name].sel(dataset=k).values, both[name][k])


def test_chunk_of_other_data_set_is_recomputed(tmp_path):
    grid = ibflow.Grid(scale=SCALES, shape=SHAPES)
    ref = tmp_path / "ref"
    ibflow.sweep(BUILD, grid, [data(), second_data()], out=ref, **OPTIONS)
    out = tmp_path / "out"
    shutil.copytree(ref, out)
    # Same members, same hash, other data set: chunk 3 is data set 1's chunk 0.
    shutil.copy(out / "chunks" / "chunk-00003.npz", out / "chunks" / "chunk-00000.npz")
    with pytest.warns(UserWarning, match="chunk-00000.npz holds other members"):
        ibflow.sweep(BUILD, grid, [data(), second_data()], out=out, **OPTIONS)
    assert_identical(out, ref, ["results.npz"] + [f"chunks/chunk-{i:05d}.npz" for i in range(6)])


# --- concurrency ----------------------------------------------------------------------------

def test_concurrent_run_fails_naming_the_directory(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    with open(out / ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run holds the directory
        with pytest.raises(RuntimeError, match=f"{out}.*another sweep"):
            run(out)
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    run(out)  # released: the next run proceeds
    assert_identical(out, reference / "main")


def test_new_values_and_tolerances_reuse_one_compilation(reference, tmp_path):
    from ibflow._sweep.executor import _integrate_batch

    run(None)  # compiled already by the reference fixture; now count
    before = eqx.debug.get_num_traces(_integrate_batch)
    for k, rtol in enumerate([1e-7, 1e-5]):
        grid = ibflow.Grid(scale=[0.05 * (k + 1), 0.2], shape=[0.1, 0.3, 0.6])
        assert run(None, grid=grid, rtol=rtol).converged.all()
    assert eqx.debug.get_num_traces(_integrate_batch) == before


HOLDER = textwrap.dedent("""
    import fcntl, sys, time
    with open(sys.argv[1], "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(600)
""")


def test_lock_held_by_another_process_then_released_by_its_death(reference, tmp_path):
    out = copy_of(reference, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out / ".lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RuntimeError, match=f"{out}.*being written by another sweep"):
            run(out)
    finally:
        holder.send_signal(signal.SIGKILL)  # a crashed run: the kernel drops its lock
        holder.wait()
        holder.stdout.close()
    run(out)
    assert_identical(out, reference / "main")


# --- SIGKILL at several points, resumed byte-identical -----------------------------------------

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import equinox as eqx, jax, ibflow
    from ibflow._sweep import store, sweep as sweep_module

    class Diagonal(eqx.Module):
        dim: int = eqx.field(static=True)

        def __call__(self, scale, shape):
            return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=self.dim)

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    point = os.environ.get("KILL_AT", "")
    Store = store.Store
    if point == "before-first-chunk":
        Store.save_chunk = lambda *a, **k: die()
    elif point == "after-second-chunk":
        saved, original = [], Store.save_chunk
        def save(self, *a, **k):
            original(self, *a, **k)
            saved.append(1)
            if len(saved) == 2:
                die()
        Store.save_chunk = save
    elif point == "inside-chunk-write":
        replace = os.replace
        def slow_replace(src, dst):
            if str(dst).endswith("chunk-00001.npz"):
                die()
            replace(src, dst)
        store.os.replace = slow_replace
    elif point == "assembly":
        sweep_module.assemble = lambda *a, **k: die()
    elif point == "between-results-and-metadata":
        Store.write_metadata_original = Store.write_metadata
        def write(self, metadata):
            if "lockstep_efficiency" in metadata:
                die()
            self.write_metadata_original(metadata)
        Store.write_metadata = write
    data = ibflow.data.sparse_regression(jax.random.key(11), n={N}, d={D}, k=2, n_test=7)
    grid = ibflow.Grid(scale={SCALES}, shape={SHAPES})
    ibflow.sweep(Diagonal({D}), grid, data, out=sys.argv[1], chunk_size=2, progress=False,
                 references=("min_l2",), rtol=1e-6, atol=1e-10, stiff_solver=None,
                 target_loss=1e-8)
""").format(N=N, D=D, SCALES=SCALES, SHAPES=SHAPES)


@pytest.fixture(scope="module")
def kill_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    script = root / "sweep_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ) | {"JAX_COMPILATION_CACHE_DIR": str(root / "jax-cache"),
                              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def launch(out, point=""):
        return subprocess.run([sys.executable, str(script), str(out)], env=env | {
            "KILL_AT": point}, capture_output=True, text=True, timeout=600)

    proc = launch(root / "uninterrupted")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, launch


#: Kill points in the order a run meets them, with the chunk files on disk when each fires in a
#: run resumed from the previous one: "before-first-chunk" dies at once (0 chunks);
#: "inside-chunk-write" saves chunk 0 and dies renaming chunk 1 (1); "after-second-chunk" saves
#: chunks 1 and 2, the last two, and dies before assembling (3); the last two die in assembly.
KILL_CHAIN = [("before-first-chunk", 0), ("inside-chunk-write", 1), ("after-second-chunk", 3),
              ("assembly", 3), ("between-results-and-metadata", 3)]


def test_sigkill_at_every_point_resumes_byte_identical(kill_setup, tmp_path):
    """One output directory killed at each point in turn: every run resumes the state the
    previous kill left (a resumed run killed again included), keeps the chunks that were
    finished (not recomputed: same mtimes), and the run that finishes writes exactly the
    uninterrupted run's bytes. One process per kill point, not two: the suite's time."""
    root, launch = kill_setup
    out = tmp_path / "res"
    for point, chunks in KILL_CHAIN:
        survivors = mtimes(out)
        killed = launch(out, point)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
        assert len(list((out / "chunks").glob("chunk-*.npz"))) == chunks, point
        assert (out / "sweep.json").exists(), point
        assert mtimes(out).items() >= survivors.items(), point
    survivors = mtimes(out)
    resumed = launch(out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert mtimes(out) == survivors  # every chunk was finished before: none recomputed
    assert_identical(out, root / "uninterrupted")
    assert not list(out.rglob(".*.tmp"))


# --- bad grids and options: refused by name, before any computation --------------------------

@pytest.mark.parametrize("axes, match", [
    ({}, "at least one named axis"),
    ({"scale": [0.1, np.nan]}, "'scale' has non-finite"),
    ({"scale": [np.inf]}, "'scale' has non-finite"),
    ({"scale": [-np.inf, 0.1]}, "'scale' has non-finite"),
    ({"scale": []}, "'scale' must be a non-empty 1-d"),
    ({"scale": [[0.1, 0.2]]}, "'scale' must be a non-empty 1-d"),
    ({"scale": 0.1}, "'scale' must be a non-empty 1-d"),
    ({"scale": ["a", "b"]}, "'scale' must be real numbers"),
    ({"scale": [True, False]}, "'scale' must be real numbers"),
    ({"scale": [1j, 2j]}, "'scale' must be real numbers"),
    ({"scale": [None, 0.1]}, "'scale' must be real numbers"),
    ({"scale": [[0.1], 0.2]}, "'scale' is not an array of numbers"),
    ({"dataset": [0, 1]}, "'dataset' is reserved"),
    ({"coordinate": [0, 1]}, "'coordinate' is reserved"),
])
def test_bad_grid_is_refused_by_name(axes, match):
    with pytest.raises(ValueError, match=match):
        ibflow.Grid(**axes)


@pytest.mark.parametrize("name", ["max_steps", "solver", "stiff_solver", "adjoint", "flow", "loss",
                                  "method", "save_at", "throw", "progress"])
def test_static_option_axis_is_refused_by_name(name):
    grid = ibflow.Grid(scale=[0.1], **{name: [1, 2]})
    with pytest.raises(ValueError, match=f"grid axis '{name}' names an integrate option"):
        ibflow.sweep(BUILD, grid, data())


@pytest.mark.parametrize("kwargs, match", [
    ({"rtoll": 1e-6}, "'rtoll' is not an option of ibflow.integrate"),
    ({"scale": 0.1}, "'scale' is not an option of ibflow.integrate"),
    ({"throw": True}, "'throw' cannot be passed"),
    ({"order": "cost"}, "order must be an ibflow.AbstractOrder"),
    ({"references": ("min_l3",)}, "unknown references"),
    ({"references": "min_l1"}, "references must be a sequence"),
    ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
    ({"chunk_size": -2}, "chunk_size must be an integer >= 1"),
    ({"chunk_size": 2.5}, "chunk_size must be an integer >= 1"),
])
def test_bad_sweep_argument_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ibflow.sweep(BUILD, ibflow.Grid(scale=[0.1], shape=[0.0]), data(), **kwargs)


def test_grid_axis_unknown_to_build_and_integrate_is_refused():
    with pytest.raises(ValueError, match="grid axis 'width' is neither an option"):
        ibflow.sweep(BUILD, ibflow.Grid(scale=[0.1], width=[2]), data())


def test_axis_given_twice_is_refused():
    with pytest.raises(ValueError, match="'rtol' is both a grid axis and a keyword"):
        ibflow.sweep(BUILD, ibflow.Grid(scale=[0.1], shape=[0.0], rtol=[1e-6]), data(), rtol=1e-8)


def test_grid_must_be_a_grid():
    with pytest.raises(ValueError, match="grid must be an ibflow.Grid"):
        ibflow.sweep(BUILD, {"scale": [0.1]}, data())


@pytest.mark.parametrize("bad, match", [
    ("not data", "data must be a RegressionData"),
    ([], "data is an empty list"),
    ((np.ones((3, D)),), "data must be a RegressionData"),
    ((np.ones((3, D)), np.ones(4)), "disagree on the number of examples"),
    ((np.full((3, D), np.nan), np.ones(3)), "X"),
    ((np.ones((3, D)), np.ones(3), np.ones((2, D + 1)), np.ones(2)), "X_test has"),
    ([(np.ones((3, D)), np.ones(3)), (np.ones((4, D)), np.ones(4))], "same shapes"),
])
def test_bad_data_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        ibflow.sweep(BUILD, ibflow.Grid(scale=[0.1], shape=[0.0]), bad)


def test_chunk_with_object_array_is_not_unpickled(tmp_path):
    # read_npz never unpickles: an object array inside a chunk is refused, not executed.
    path = tmp_path / "x.npz"
    np.savez(path, index=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        sweep_store.read_npz(path)
    assert zipfile.is_zipfile(path)
