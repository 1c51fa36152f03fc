"""Shared test helpers: random problems and every foundation model, for parametrized tests."""

import jax
import jax.numpy as jnp

import ibflow


def random_problem(key, n=10, d=40):
    kx, ky = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    y = jax.random.normal(ky, (n,))
    return X, y


def relative(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def foundation_models(key, d):
    """One instance of every foundation model (unbiased and biased where it applies)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    u = 0.3 * jax.random.normal(k4, (4, d))
    return {
        "diagonal-unbiased": ibflow.DiagonalNet.from_scale_shape(0.05, 0.4, dim=d),
        "diagonal-biased": ibflow.DiagonalNet(*u),
        "fc-width1": ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.2, dim=d, key=k1),
        "fc-width3": ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.2, dim=d, width=3, key=k2),
        "leaky": ibflow.LeakyReLUNeuron.from_scale_shape(0.5, 0.3, dim=d, slope=0.5, key=k3),
    }
