"""Every bad input named in the foundation issue raises a clear ValueError."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import ibflow


@pytest.fixture
def problem():
    X = jax.random.normal(jax.random.key(0), (5, 8))
    return X, X @ jnp.ones(8)


def test_shape_mismatch(problem):
    X, y = problem
    model = ibflow.DiagonalNet.from_scale_shape(0.1, dim=8)
    with pytest.raises(ValueError, match="disagree on the number of examples"):
        ibflow.integrate(model, X, y[:3])
    with pytest.raises(ValueError, match="2-d array"):
        ibflow.integrate(model, X[0], y)
    with pytest.raises(ValueError, match="input dimension 8 but X has 7"):
        ibflow.integrate(model, X[:, :7], y)


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf])
def test_non_finite_data(problem, bad):
    X, y = problem
    model = ibflow.DiagonalNet.from_scale_shape(0.1, dim=8)
    with pytest.raises(ValueError, match="X contains non-finite"):
        ibflow.integrate(model, X.at[1, 2].set(bad), y)
    with pytest.raises(ValueError, match="y contains non-finite"):
        ibflow.integrate(model, X, y.at[0].set(bad))


@pytest.mark.parametrize("scale", [0.0, -1.0, jnp.nan])
def test_scale_must_be_positive(scale):
    with pytest.raises(ValueError, match="scale alpha must be > 0"):
        ibflow.DiagonalNet.from_scale_shape(scale, 0.0, dim=4)
    with pytest.raises(ValueError, match="scale alpha must be > 0"):
        ibflow.FullyConnectedNet.from_scale_shape(scale, 0.0, dim=4, key=jax.random.key(0))
    with pytest.raises(ValueError, match="scale alpha must be > 0"):
        ibflow.LeakyReLUNeuron.from_scale_shape(scale, 0.0, dim=4, key=jax.random.key(0))


@pytest.mark.parametrize("shape", [1.0, -1.0, 1.5])
def test_shape_in_open_interval(shape):
    with pytest.raises(ValueError, match=r"shape s must lie in the open interval \(-1.0, 1.0\)"):
        ibflow.DiagonalNet.from_scale_shape(0.1, shape, dim=4)
    with pytest.raises(ValueError, match="shape s must lie"):
        ibflow.FullyConnectedNet.from_scale_shape(0.1, shape, dim=4, key=jax.random.key(0))


@pytest.mark.parametrize("width", [0, -2, 1.5])
def test_width_at_least_one(width):
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        ibflow.FullyConnectedNet.from_scale_shape(0.1, 0.0, dim=4, width=width,
                                                  key=jax.random.key(0))


@pytest.mark.parametrize("slope", [0.0, -0.1, 1.2])
def test_slope_in_unit_interval(slope):
    with pytest.raises(ValueError, match=r"slope gamma must lie in \(0.0, 1.0\]"):
        ibflow.LeakyReLUNeuron.from_scale_shape(0.1, 0.0, dim=4, slope=slope,
                                                key=jax.random.key(0))
    with pytest.raises(ValueError, match="slope gamma must lie"):
        ibflow.LeakyReLUNeuron(a=jnp.array(1.0), w=jnp.ones(4), slope=jnp.array(slope))


def test_traced_bad_values_error_at_run_time():
    make = jax.jit(lambda a: ibflow.DiagonalNet.from_scale_shape(a, 0.0, dim=4).u_plus)
    with pytest.raises(Exception, match="scale alpha must be > 0"):
        make(jnp.array(-1.0))


# --- issue "Results that cannot be silently wrong", items 5 and 10: refused before compiling,
# naming what the user passed ---------------------------------------------------------------------

@pytest.mark.parametrize("save_at, kwargs, match", [
    ([2.0, 1.0], {}, "strictly increasing"),
    ([1.0, 1.0], {}, "strictly increasing"),
    (["a", "b"], {}, "save_at"),
    ([[1.0, 2.0]], {}, "save_at"),
    ([], {}, "save_at is empty"),
    ([-1.0, 1.0], {}, "save_at must be >= 0"),
    ([1.0, 20.0], {"t_max": 10.0}, "beyond t_max"),
    ([1.0, 2e14], {}, "beyond the default horizon"),
    ([1.0, float("nan")], {}, "save_at contains non-finite"),
    ([1.0 + 1j], {}, "save_at is complex"),
])
def test_bad_save_at_is_refused_by_name(problem, save_at, kwargs, match):
    X, y = problem
    model = ibflow.DiagonalNet.from_scale_shape(0.1, dim=8)
    with pytest.raises(ValueError, match=match):
        ibflow.integrate(model, X, y, save_at=save_at, stiff_solver=None, **kwargs)


def test_overflowing_y_blames_y_not_target_loss(problem):
    X, y = problem
    model = ibflow.DiagonalNet.from_scale_shape(0.1, dim=8)
    with pytest.raises(ValueError, match="y is too large") as error:
        ibflow.integrate(model, X, 1e300 * y)
    assert "target_loss" not in str(error.value)


class _Complex(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return jnp.real(self.w @ x)


def test_complex_parameters_are_refused_by_name(problem):
    X, y = problem
    with pytest.raises(ValueError, match=r"model parameter model\.w is complex"):
        ibflow.integrate(_Complex(jnp.ones(8, complex)), X, y)


@pytest.mark.parametrize("name, value, match", [
    ("rtol", -1.0, "rtol must be > 0"), ("atol", -1.0, "atol must be >= 0"),
    ("target_loss", -1.0, "target_loss must be >= 0"), ("t_max", 0.0, "t_max must be > 0"),
    ("stiff_switch", 0.0, "stiff_switch must be > 0"), ("dt0", -1.0, "dt0 must be > 0"),
    ("rtol", "a", "rtol must be a real number"), ("rtol", [1.0], "rtol must be a real"),
    ("t_max", float("inf"), "t_max contains non-finite"),
])
def test_float_options_are_checked_by_the_rules_a_sweep_uses(name, value, match):
    from ibflow._integrate import check_option

    with pytest.raises(ValueError, match=match):
        check_option(name, value)
