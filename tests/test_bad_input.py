"""Every bad input named in the foundation issue raises a clear ValueError."""

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
