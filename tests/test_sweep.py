"""Sweep engine: limits, per-member statuses, resumable results, multiple devices."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow._status import STATUS_NAMES
from ibflow._sweep import executor as executor_module

N, D = 12, 40


class Diagonal(eqx.Module):
    """``build`` compared by value: every sweep below over one dimension compiles once."""

    dim: int = eqx.field(static=True)

    def __call__(self, scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=self.dim)


class Leaky(eqx.Module):
    dim: int = eqx.field(static=True)

    def __call__(self, scale, seed):
        return ibflow.LeakyReLUNeuron.from_scale_shape(scale, 0.5, dim=self.dim, slope=0.2,
                                                       key=jax.random.key(seed))

SCRIPT = textwrap.dedent("""
    import sys, jax, numpy as np, ibflow
    data = ibflow.data.sparse_regression(jax.random.key(7), n={N}, d={D}, k=3)
    grid = ibflow.Grid(scale=np.logspace(-4, 0, {scales}), shape=[0.0, 0.6])
    build = lambda scale, shape: ibflow.DiagonalNet.from_scale_shape(scale, shape, dim={D})
    res = ibflow.sweep(build, grid, data, out=sys.argv[1], chunk_size=4, progress=False,
                       rtol=1e-6, atol=1e-14)
    print("devices", len(jax.devices()), "converged", int(res.converged.sum()))
""")


def _script(tmp_path, scales):
    path = tmp_path / "run_sweep.py"
    path.write_text(SCRIPT.format(N=N, D=D, scales=scales))
    return path


def _run(script, out, env_extra=None):
    # Subprocesses share a persistent compilation cache: only the first one compiles.
    cache = {"JAX_COMPILATION_CACHE_DIR": str(Path(script).parent.parent / "jax-cache"),
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    env = dict(os.environ) | cache | (env_extra or {})
    return subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def small_sweep():
    data = ibflow.data.sparse_regression(jax.random.key(7), n=N, d=D, k=3)
    grid = ibflow.Grid(scale=np.logspace(-4, 0, 4), shape=[0.0, 0.6])
    res = ibflow.sweep(Diagonal(D), grid, data, chunk_size=2, progress=False, rtol=1e-6,
                       atol=1e-10)
    return data, grid, res


def test_sweep_limits_match_theorem_1(small_sweep):
    # The loose path tolerance does not move the limit: compare with the dual minimizer.
    data, grid, res = small_sweep
    assert res.converged.all()
    for i, scale in enumerate(grid.axes["scale"]):
        for j, shape in enumerate(grid.axes["shape"]):
            model = ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=D)
            ref = ibflow.minimize_regularizer(ibflow.implicit_bias(model), data.X, data.y).w
            w = res["predictor"][i, j]
            assert np.linalg.norm(w - ref) <= 1e-8 * np.linalg.norm(ref)


def test_sweep_equals_individual_integrations(small_sweep):
    data, grid, res = small_sweep
    model = ibflow.DiagonalNet.from_scale_shape(grid.axes["scale"][2], 0.6, dim=D)
    sol = ibflow.integrate(model, data.X, data.y, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(res["predictor"][2, 1], sol.predictor, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["test_error"][2, 1], data.test_error(sol.predictor), rtol=1e-12)
    l1 = ibflow.min_l1_interpolant(data.X, data.y)
    np.testing.assert_allclose(res["distance_min_l1"][2, 1],
                               np.linalg.norm(sol.predictor - l1) / np.linalg.norm(l1), rtol=1e-9)


def test_references_are_computed_once_per_data_set(small_sweep, monkeypatch):
    """A second sweep of the same data reuses its reference interpolants (the min-ℓ1 one is a
    linear program); other data get their own, and the distances are right either way."""
    from ibflow._sweep import sweep as S

    data, grid, _ = small_sweep
    calls = []
    real = S._REFERENCES["min_l2"]
    monkeypatch.setitem(S._REFERENCES, "min_l2", lambda X, y: calls.append(1) or real(X, y))
    monkeypatch.setattr(S, "_REFERENCE_CACHE", {})
    options = dict(chunk_size=2, progress=False, rtol=1e-6, atol=1e-10, references=("min_l2",))
    other_y = np.asarray(data.y) * 2.0
    for X, y in ((data.X, data.y), (data.X, data.y), (data.X, other_y)):
        res = ibflow.sweep(Diagonal(D), grid, (X, y), **options)
        l2 = np.linalg.pinv(np.asarray(X)) @ np.asarray(y)  # numpy, not ibflow
        w = res["predictor"][1, 1]
        np.testing.assert_allclose(res["distance_min_l2"][1, 1],
                                   np.linalg.norm(w - l2) / np.linalg.norm(l2), rtol=1e-9)
    assert len(calls) == 2


def test_default_chunk_follows_the_tail():
    """On a CPU the default chunk is large where the flows end in the compacting Newton tail
    (the diagonal net with default options), 1 for flows through kinks and 8 otherwise, decided
    as `integrate` decides its tail."""
    from ibflow._sweep import sweep as S

    data = ibflow.data.sparse_regression(jax.random.key(7), n=N, d=D, k=3)
    dataset = {"X": np.asarray(data.X), "y": np.asarray(data.y)}
    diagonal = ibflow.DiagonalNet.from_scale_shape(0.1, 0.0, dim=D)
    leaky = Leaky(D)(0.1, 0)
    cases = [(diagonal, {}, True), (diagonal, {"stiff_switch": 1e-4}, False),
             (diagonal, {"target_loss": 1e-8}, False),
             (diagonal, {"stiff_solver": dfx.Kvaerno5()}, False),
             (diagonal, {"save_at": np.linspace(0, 1, 3)}, False), (leaky, {}, False)]
    for model, options, want in cases:
        assert S._compacting(S._dynamics(model, dataset, options), options) is want, options
    # A swept option is set for the members that carry it.
    for axis in ("stiff_switch", "target_loss", "t_max"):
        assert not S._compacting(S._dynamics(diagonal, dataset, {}), {}, (axis,)), axis
    assert S._default_chunk("cpu", 1000, True) == S.COMPACTING_CPU_CHUNK
    assert S._default_chunk("cpu", 1000, False) == S.CPU_CHUNK == 8
    assert S._default_chunk("cpu", 1000, False, switching=True) == S.SWITCHING_CPU_CHUNK == 1
    assert S._default_chunk("gpu", 1000, False) == 1000


def test_failing_member_reported_while_others_complete():
    data = ibflow.data.sparse_regression(jax.random.key(7), n=N, d=D, k=3)
    # A time budget of 1e-12 stops a member after its first step.
    grid = ibflow.Grid(scale=[1e-3, 0.1], t_max=[1e14, 1e-12])
    res = ibflow.sweep(lambda scale: ibflow.DiagonalNet.from_scale_shape(scale, 0.0, dim=D),
                       grid, data, chunk_size=4, progress=False, rtol=1e-6, atol=1e-10)
    codes = res.metadata["status_codes"]
    assert (res["status"][:, 0] == codes["converged"]).all()
    assert (res["status"][:, 1] == codes["budget_exhausted"]).all()
    assert (res["steps"][:, 1] <= 1).all()


def test_results_directory_is_readable_without_ibflow(small_sweep, tmp_path):
    data, grid, _ = small_sweep
    out = tmp_path / "res"
    ibflow.sweep(Diagonal(D), grid, data, out=out, chunk_size=2, progress=False, rtol=1e-6,
                 atol=1e-10)
    import json

    meta = json.loads((out / "sweep.json").read_text())
    with np.load(out / "results.npz") as f:
        assert f["predictor"].shape == (4, 2, D)
        np.testing.assert_array_equal(f["axis_scale"], grid.axes["scale"])
    assert meta["config"]["axes"]["shape"] == [0.0, 0.6]
    assert meta["versions"]["jax"] == jax.__version__
    assert len(list((out / "chunks").glob("chunk-*.npz"))) == 4
    with pytest.raises(ValueError, match="holds a different sweep"):
        ibflow.sweep(Diagonal(D), ibflow.Grid(scale=[0.1], shape=[0.0]), data, out=out,
                     progress=False)


def test_open_sweep_labels_match_sweep_result(small_sweep, tmp_path):
    data, grid, _ = small_sweep
    out = tmp_path / "res"
    res = ibflow.sweep(Diagonal(D), grid, data, out=out, chunk_size=2, progress=False,
                       rtol=1e-6, atol=1e-10)
    ds = ibflow.open_sweep(out)
    assert ds["predictor"].dims == ("scale", "shape", "coordinate")
    for i, scale in enumerate(grid.axes["scale"]):
        for j, shape in enumerate(grid.axes["shape"]):
            cell = ds.sel(scale=scale, shape=shape)
            for name in res.fields:
                np.testing.assert_array_equal(cell[name].values, res[name][i, j], err_msg=name)
    flags = ds["status"].attrs
    assert flags["flag_meanings"].split() == list(STATUS_NAMES)
    np.testing.assert_array_equal(flags["flag_values"], np.arange(len(STATUS_NAMES)))
    assert ds.attrs["config_hash"] == res.metadata["config_hash"]
    assert json.loads(ds.attrs["versions"])["jax"] == jax.__version__
    xr = res.to_xarray()
    assert xr.identical(ds)


def test_sweep_over_leaky_neuron_records_test_error_of_its_outputs():
    # The test error is the MSE of the model's own outputs a·σ(<w, x>), not of X_test @ w̃.
    d, slope = 8, 0.2
    data = ibflow.data.sparse_regression(jax.random.key(3), n=5, d=d, k=2, n_test=30)
    grid = ibflow.Grid(scale=[0.05, 0.2], seed=[0, 1, 2])
    res = ibflow.sweep(Leaky(d), grid, data, chunk_size=4, progress=False, rtol=1e-8,
                       atol=1e-12, target_loss=1e-12, references=())
    # A piecewise-linear model also records its kink events per member (docs/theory §8.2).
    assert set(res.fields) == {"loss", "steps", "time", "status", "test_error", "predictor",
                               "parameters", "switches", "slides", "sliding_time"}
    assert res.converged.all()
    switches, slides = res["switches"], res["slides"]
    assert np.all(switches >= slides) and np.all(slides >= 0)
    assert np.all((res["sliding_time"] >= 0) & (res["sliding_time"] <= res["time"]))
    for i, scale in enumerate(grid.axes["scale"]):
        for j, seed in enumerate(grid.axes["seed"]):
            # The sign of a never changes along the flow (a² − ‖w‖² > 0 is conserved), so the
            # final model is sign(a)·σ(sign(a)·<w̃, x>) with w̃ the recorded predictor.
            sign = np.sign(Leaky(d)(jnp.asarray(scale), jnp.asarray(seed)).a)
            z = sign * (np.asarray(data.X_test) @ res["predictor"][i, j])
            outputs = sign * np.where(z > 0, z, slope * z)
            direct = np.mean((outputs - np.asarray(data.y_test)) ** 2)
            np.testing.assert_allclose(res["test_error"][i, j], direct, rtol=1e-12)
            model = res.model(Leaky(d), scale=scale, seed=seed)
            own = np.mean((np.asarray(jax.vmap(model)(data.X_test)) - np.asarray(data.y_test)) ** 2)
            np.testing.assert_allclose(res["test_error"][i, j], own, rtol=1e-12)
            linear = data.test_error(res["predictor"][i, j])  # the old, wrong formula
            assert abs(linear - direct) > 1e-3 * direct


SMALL = dict(rtol=1e-6, atol=1e-10, stiff_solver=None, target_loss=1e-8)


def small_data():
    return ibflow.data.sparse_regression(jax.random.key(11), n=5, d=8, k=2, n_test=7)


def test_sweeping_dt0_passes_it_per_member():
    data = small_data()
    grid = ibflow.Grid(scale=[1e-2], shape=[0.0], dt0=[1e-4, 10.0])
    res = ibflow.sweep(Diagonal(8), grid, data, chunk_size=2, progress=False, references=(),
                       **SMALL)
    model = ibflow.DiagonalNet.from_scale_shape(1e-2, 0.0, dim=8)
    for k, dt0 in enumerate(grid.axes["dt0"]):
        sol = ibflow.integrate(model, data.X, data.y, dt0=dt0, **SMALL)
        assert res["steps"][0, 0, k] == sol.steps
        np.testing.assert_allclose(res["predictor"][0, 0, k], sol.predictor, atol=1e-12)
    assert res["steps"][0, 0, 0] != res["steps"][0, 0, 1]
    assert res.converged.all()


def test_sweeping_adjoint_is_refused_by_name():
    data = small_data()
    with pytest.raises(ValueError, match="grid axis 'adjoint'"):
        ibflow.sweep(Diagonal(8), ibflow.Grid(scale=[0.1], adjoint=[0, 1]), data)
    # As a keyword it passes through unchanged.
    res = ibflow.sweep(Diagonal(8), ibflow.Grid(scale=[0.1], shape=[0.0]), data, chunk_size=2,
                       progress=False, references=(), adjoint=dfx.DirectAdjoint(), **SMALL)
    assert res.converged.all()


def test_four_simulated_devices_match_one(tmp_path):
    script = _script(tmp_path, scales=4)
    one, four = tmp_path / "one", tmp_path / "four"
    flags = os.environ.get("XLA_FLAGS", "")  # keep the suite's compile flags (conftest.py)
    r1 = _run(script, one, {"XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=1"})
    r4 = _run(script, four, {"XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4"})
    assert r1.returncode == 0 and r4.returncode == 0, r4.stderr[-2000:]
    assert "devices 4" in r4.stdout and "devices 1" in r1.stdout
    # Statuses and step counts are identical; values agree to a few ulps (the partitioned
    # program reassociates some float64 sums: bitwise identity across device counts is not
    # guaranteed by XLA).
    with np.load(one / "results.npz") as a, np.load(four / "results.npz") as b:
        for k in ("status", "steps", "axis_scale", "axis_shape"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        for k in ("predictor", "test_error", "distance_min_l1", "distance_min_l2"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-13, atol=1e-15, err_msg=k)
        assert np.all(b["loss"] <= 1e-20)


class PlainTanh(eqx.Module):
    """A user's own model: no ibflow base class, no predictor, no invariants."""

    w: jax.Array

    def __call__(self, x):
        return jnp.tanh(jnp.dot(self.w, x))


class BuildPlain(eqx.Module):
    dim: int = eqx.field(static=True)

    def __call__(self, scale):
        return PlainTanh(scale * jnp.linspace(-1.0, 1.0, self.dim))


def test_sweep_over_a_plain_module_records_test_error_of_its_outputs():
    d = 6
    data = ibflow.data.sparse_regression(jax.random.key(5), n=4, d=d, k=2, n_test=20)
    y, y_test = 0.5 * jnp.tanh(data.y), 0.5 * jnp.tanh(data.y_test)
    grid = ibflow.Grid(scale=[0.1, 0.3])
    res = ibflow.sweep(BuildPlain(d), grid, (data.X, y, data.X_test, y_test), chunk_size=2,
                       progress=False, rtol=1e-12, atol=1e-14, target_loss=1e-16)
    assert set(res.fields) == {"loss", "steps", "time", "status", "test_error", "parameters"}

    for i, scale in enumerate(grid.axes["scale"]):
        model = res.model(BuildPlain(d), scale=scale)  # the final model, from `parameters`
        assert isinstance(model, PlainTanh)
        direct = jnp.mean((jax.vmap(model)(data.X_test) - y_test) ** 2)
        np.testing.assert_allclose(res["test_error"][i], direct, rtol=1e-12)
        # An independent solve reaches the same limit to the path tolerance.
        sol = ibflow.integrate(BuildPlain(d)(jnp.asarray(scale)), data.X, y, rtol=1e-12,
                               atol=1e-14, target_loss=1e-16)
        np.testing.assert_allclose(model.w, sol.model.w, rtol=1e-6)
    assert res.converged.all()


class BuildReLUNet(eqx.Module):
    dim: int = eqx.field(static=True)

    def __call__(self, scale):
        return ibflow.TwoLayerNet.from_scale_shape(scale, 0.3, dim=self.dim, width=4,
                                                   activation=ibflow.ReLU(), bias=True,
                                                   key=jax.random.key(11))


def test_sweep_over_the_two_layer_relu_net_records_test_error_of_its_outputs():
    """Issue 11: the sweep's test error is the MSE of the model's own outputs — for a two-layer
    ReLU network, not ``X_test @ w``. Checked against the final models rebuilt from the stored
    parameters and evaluated directly."""
    d = 6
    data = ibflow.data.sparse_regression(jax.random.key(6), n=4, d=d, k=2, n_test=20)
    grid = ibflow.Grid(scale=[0.5, 1.0])
    res = ibflow.sweep(BuildReLUNet(d), grid, (data.X, data.y, data.X_test, data.y_test),
                       chunk_size=2, progress=False, max_steps=5_000)
    assert "predictor" not in res.fields
    for i, scale in enumerate(grid.axes["scale"]):
        model = res.model(BuildReLUNet(d), scale=scale)
        assert isinstance(model, ibflow.TwoLayerNet)
        direct = jnp.mean((jax.vmap(model)(data.X_test) - data.y_test) ** 2)
        np.testing.assert_allclose(res["test_error"][i], direct, rtol=1e-12)
        loss = 0.5 * jnp.mean((jax.vmap(model)(data.X) - data.y) ** 2)
        np.testing.assert_allclose(res["loss"][i], loss, rtol=1e-10, atol=1e-300)
    assert "not_computed" not in {res.status_names[int(c)] for c in res["status"]}


def test_paired_data_runs_each_member_on_its_own_data_set():
    """A grid axis ``data_index`` picks each member's data set from the list (per-member data);
    checked against each member integrated alone on its own data, and its reference distance
    against its own data set's minimal-ℓ2 interpolant. `build` that names ``data_index`` gets
    it; one that does not is called without it."""
    sets = [ibflow.data.sparse_regression(jax.random.key(k), n=N, d=D, k=3) for k in range(3)]
    data = [(s.X, s.y) for s in sets]
    grid = ibflow.Grid(data_index=np.array([2, 0, 1]), scale=[1e-3, 0.3])

    def build(data_index, scale):
        return ibflow.DiagonalNet.from_scale_shape(scale, 0.2 * jnp.asarray(data_index, float),
                                                   dim=D)

    res = ibflow.sweep(build, grid, data, progress=False, references=("min_l2",))
    assert res["predictor"].shape == (3, 2, D) and res.converged.all()
    for i, k in enumerate(grid.axes["data_index"]):
        for j, scale in enumerate(grid.axes["scale"]):
            sol = ibflow.integrate(build(k, scale), sets[k].X, sets[k].y)
            w = res["predictor"][i, j]
            assert np.linalg.norm(w - sol.predictor) <= 1e-10 * np.linalg.norm(sol.predictor)
            l2 = np.linalg.pinv(np.asarray(sets[k].X)) @ np.asarray(sets[k].y)
            np.testing.assert_allclose(res["distance_min_l2"][i, j],
                                       np.linalg.norm(w - l2) / np.linalg.norm(l2), rtol=1e-8)
    # A build without the axis: the member's data still follow it.
    plain = ibflow.sweep(Diagonal(D), ibflow.Grid(data_index=[1], scale=[0.3], shape=[0.0]),
                         data, progress=False, references=())
    sol = ibflow.integrate(Diagonal(D)(0.3, 0.0), sets[1].X, sets[1].y)
    w = plain["predictor"][0, 0, 0]
    assert np.linalg.norm(w - sol.predictor) <= 1e-10 * np.linalg.norm(sol.predictor)


@pytest.mark.parametrize("data, values, match", [
    ("one", [0], "pass data as a list"),
    ("list", [0, 3], "integer indices into data"),
    ("list", [-1], "integer indices into data"),
    ("list", [0.5], "integer indices into data"),
])
def test_paired_data_axis_is_checked(data, values, match):
    sets = [ibflow.data.sparse_regression(jax.random.key(k), n=N, d=D, k=3) for k in range(2)]
    given = sets[0] if data == "one" else [(s.X, s.y) for s in sets]
    with pytest.raises(ValueError, match=match):
        ibflow.sweep(Diagonal(D), ibflow.Grid(data_index=values, scale=[0.1], shape=[0.0]),
                     given, progress=False)


def _cores():
    """The chunks a sweep runs at once here: 2 on two cores, half the cores on more."""
    cores = executor_module.usable_cores()
    return 1 if cores < 2 else max(2, cores // 2)


@pytest.mark.skipif(jax.devices()[0].platform != "cpu", reason="chunks at once: one CPU device")
def test_chunks_run_at_once_give_the_records_of_chunks_run_one_at_a_time(monkeypatch):
    """On a CPU, chunks of flows through kinks (one member each) run one per core at once, and
    every member gets the record it gets when the chunks run one at a time: ReLU students of
    `benchmarks.students`, each on its own teacher's data, swept twice by one compiled
    program. Each member's loss is also its rebuilt model's loss on its own data set."""
    from benchmarks import students

    picked = np.array([3, 9, 13, 17])
    data = [students.student_data(k) for k in range(int(picked.max()) + 1)]
    grid = ibflow.Grid(data_index=picked)
    at_once = ibflow.sweep(students.Student(), grid, data, progress=False)
    cap = executor_module.MAX_CONCURRENT_CHUNKS
    monkeypatch.setattr(executor_module, "MAX_CONCURRENT_CHUNKS", 1)
    in_turn = ibflow.sweep(students.Student(), grid, data, progress=False)
    assert at_once.metadata["chunks_at_once"] == min(_cores(), cap)
    assert in_turn.metadata["chunks_at_once"] == 1
    assert set(at_once.fields) == set(in_turn.fields)
    for name in at_once.fields:
        np.testing.assert_array_equal(at_once[name], in_turn[name], err_msg=name)
    for i, k in enumerate(picked):
        X, y = data[k]
        model = at_once.model(students.Student(), data_index=k)
        loss = 0.5 * jnp.mean((jax.vmap(model)(X) - y) ** 2)
        np.testing.assert_allclose(at_once["loss"][i], loss, rtol=1e-8, atol=1e-300)
    assert {at_once.status_names[int(c)] for c in at_once["status"]} <= {"converged",
                                                                          "stationary"}


@pytest.mark.skipif(jax.devices()[0].platform != "cpu", reason="chunks at once: one CPU device")
def test_chunks_whose_batched_lapack_calls_are_large_run_one_at_a_time():
    """The diagonal net's Newton tail factorizes one 12 × 12 matrix per member of a chunk:
    chunks of 8 (1 152 elements) may run at once, chunks of 64 (9 216, above
    `CONCURRENT_LAPACK_ELEMENTS`) run one at a time (two such programs at once could hang,
    `ibflow._lapack`), and a sweep of one chunk has nothing to decide."""
    data = ibflow.data.sparse_regression(jax.random.key(3), n=12, d=30)
    grid = ibflow.Grid(scale=np.geomspace(1e-3, 1.0, 16), shape=np.linspace(0.0, 0.9, 8))
    small = ibflow.sweep(Diagonal(30), grid, data, chunk_size=8, progress=False)
    large = ibflow.sweep(Diagonal(30), grid, data, chunk_size=64, progress=False)
    whole = ibflow.sweep(Diagonal(30), grid, data, chunk_size=128, progress=False)
    assert small.metadata["chunks_at_once"] == min(_cores(), executor_module.MAX_CONCURRENT_CHUNKS)
    assert large.metadata["chunks_at_once"] == 1
    assert whole.metadata["chunks_at_once"] is None
    for res in (large, whole):
        np.testing.assert_allclose(small["predictor"], res["predictor"], rtol=1e-10, atol=1e-14)
    assert small.converged.all() and large.converged.all() and whole.converged.all()


def test_chunks_at_once_come_back_in_order_and_stop_with_their_consumer():
    """`_in_order`: results in the items' order whatever order they finish in, never more
    than `at_once` running together, and nothing started after the consumer stops."""
    import threading
    import time

    from ibflow._sweep.sweep import _in_order

    lock, running, most, started = threading.Lock(), [0], [0], []

    def fn(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            started.append(item)
        time.sleep(0.002 * ((7 * item) % 5))  # later items often finish first
        with lock:
            running[0] -= 1
        return item * item

    assert list(_in_order(fn, range(20), 3)) == [i * i for i in range(20)]
    assert most[0] == 3
    assert list(_in_order(fn, range(5), 1)) == [0, 1, 4, 9, 16]
    started.clear()
    for value in _in_order(fn, range(100), 2):
        if value == 9:
            break
    time.sleep(0.1)
    assert max(started) <= 5  # items 0-3 taken, at most two more begun
