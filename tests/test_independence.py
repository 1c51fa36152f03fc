"""Members of a sweep are independent (issue "Results that cannot be silently wrong", item 3):
every grid value is validated before anything runs, naming the axis and the value, and nothing
a member does changes another member's result."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow import _checks
from ibflow._status import status_code

D = 6
X = np.random.default_rng(0).normal(size=(4, D))
Y = X[:, 0] + X[:, 1]
FAST = dict(progress=False, references=(), stiff_solver=None, target_loss=1e-8, order=None)


class Build(eqx.Module):
    def __call__(self, scale, shape):
        return ibflow.DiagonalNet.from_scale_shape(scale, shape, dim=D)


BUILD = Build()


# --- refused before anything runs, naming the axis and the value (no flow compiled) ------------

@pytest.mark.parametrize("axis, values, bad", [
    ("rtol", [0.0, -1.0], "0.0"), ("rtol", [1e-6, -1.0], "-1.0"), ("rtol", [1e-6, 0.0], "0.0"),
    ("atol", [1e-10, -1e-12], "-1e-12"), ("target_loss", [1e-3, -1.0], "-1.0"),
    ("t_max", [1.0, 0.0], "0.0"), ("t_max", [-5.0], "-5.0"), ("stiff_switch", [0.0], "0.0"),
    ("dt0", [1e-3, -1e-3], "-0.001"), ("dt0", [0.0], "0.0"), ("rtol", [0, -1], "0:"),
    ("target_loss", [-1e-300], "-1e-300"),
])
def test_invalid_option_axis_value_is_refused_by_axis_and_value(axis, values, bad):
    grid = ibflow.Grid(scale=[0.1], shape=[0.0], **{axis: values})
    options = {k: v for k, v in FAST.items() if k != axis}
    with pytest.raises(ValueError, match=rf"grid axis '{axis}' has the invalid value {bad}"):
        ibflow.sweep(BUILD, grid, (X, Y), **options)


@pytest.mark.parametrize("grid, message", [
    (dict(scale=[-1.0, 1e-3, 1e-2], shape=[0.0]), "'scale' has the invalid value -1.0"),
    (dict(scale=[1e-3], shape=[0.0, 1.0]), "'shape' has the invalid value 1.0"),
    (dict(scale=[1e-3, 0.0], shape=[0.5, -1.5]), "'scale' has the invalid value 0.0.*'shape'"),
])
def test_member_build_cannot_make_is_refused_by_axis_and_value(grid, message, tmp_path):
    with pytest.raises(ValueError, match=message) as error:
        ibflow.sweep(BUILD, ibflow.Grid(**grid), (X, Y), out=tmp_path / "out", **FAST)
    assert "Nothing was run" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_runtime_checks_poison_only_the_failing_member():
    """`eqx.error_if(..., on_error="nan")` reduced its predicate over the vmapped batch: one
    failing member made every member NaN. The sweep's checks are elementwise."""
    def check(x):
        return _checks.positive(x, "x") + 0.0

    with _checks.traced_errors_as_nan():
        out = jax.jit(jax.vmap(check))(jnp.array([-1.0, 1e-3, 2.0]))
    assert np.isnan(out[0]) and out[1:].tolist() == [1e-3, 2.0]


# --- a member that fails while running changes no other member (bitwise, on CPU) --------------

#: Valid values, and scales that pass validation but fail while running (the loss of a diagonal
#: net at scale 1e160 overflows: status `nonfinite`), mixed at random.
GOOD_SCALES, BAD_SCALES, SHAPES = [1e-3, 1e-2, 0.1, 0.5, 3e-3], [1e160, 1e200], [0.0, 0.5, -0.5]


_SOLO: dict = {}


def solo(a, s, chunk):
    """The member alone in a chunk of the same size (padded with copies of itself): the same
    compiled program. (A chunk of another size is another program: XLA's CPU matrix-vector
    product at batch 1 and its matrix-matrix product at batch 2 sum in different orders, so
    every product differs in the last bit, and over ~1 400 adaptive steps the step sequence
    moves: 1 381 steps, loss 9.9399e-9 at chunk size 1 against 1 380 steps, 9.9340e-9 at 2,
    for scale 1e-3, shape 0.5 here. Likewise within a chunk of odd size the last slot takes the
    remainder path of the blocked product: at chunk size 3, scale 0.1 in slot 2 ends at loss
    9.72689e-9 and in slots 0 and 1 at 9.72690e-9; at sizes 2 and 4 every slot agrees, whatever
    the other members hold; docs/guarantees.md.)"""
    if (a, s, chunk) not in _SOLO:
        _SOLO[(a, s, chunk)] = ibflow.sweep(BUILD, ibflow.Grid(scale=[a], shape=[s]), (X, Y),
                                            chunk_size=chunk, **FAST)
    return _SOLO[(a, s, chunk)]


@pytest.mark.parametrize("seed", range(4))
def test_valid_members_equal_their_solo_runs_bitwise(seed):
    """Random grids with a few failing members, random chunk sizes: every valid member's record
    equals its solo run's bit for bit (a vmapped solve shares no step-size control and no early
    exit across members)."""
    rng = np.random.default_rng(seed)
    scales = [float(v) for v in rng.choice(GOOD_SCALES, size=rng.integers(2, 4), replace=False)]
    for bad in rng.choice(BAD_SCALES, size=rng.integers(1, 3), replace=False):
        scales.insert(int(rng.integers(0, len(scales) + 1)), float(bad))
    shapes = [float(v) for v in rng.choice(SHAPES, size=rng.integers(1, 3), replace=False)]
    chunk = int(rng.choice([2, 4]))  # even: see `solo` (odd sizes: the last slot differs)
    res = ibflow.sweep(BUILD, ibflow.Grid(scale=scales, shape=shapes), (X, Y),
                       chunk_size=chunk, **FAST)
    for i, a in enumerate(scales):
        for j, s in enumerate(shapes):
            if a in BAD_SCALES:
                assert res["status"][i, j] != status_code("converged"), (a, s)
                continue
            alone = solo(a, s, chunk)
            for name in ("loss", "steps", "time", "status", "parameters"):
                assert np.array_equal(res[name][i, j], alone[name][0, 0], equal_nan=True), (
                    a, s, name)
