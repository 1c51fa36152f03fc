"""Shared initialization helpers: scale/shape parametrizations of [THEORY §2.3][theory-2-3] and
[§2.4][theory-2-4]."""

import jax.numpy as jnp

from .. import _checks


def checked_scale_shape(alpha, shape):
    """Validate scale α > 0 and shape s ∈ (−1, 1); return them as float64 arrays."""
    alpha = _checks.real_array(alpha, "scale alpha")
    shape = _checks.real_array(shape, "shape s")
    alpha = _checks.positive_finite(_checks.as_array(alpha, float), "scale alpha")
    shape = _checks.in_open_interval(_checks.as_array(shape, float), -1.0, 1.0, "shape s")
    return alpha, shape


def layer_norms(alpha, shape):
    """``(large, small) = (sqrt(α(1+s)/(1−s)), sqrt(α(1−s)/(1+s)))``: so large·small = α and
    (large − small)/(large + small) = s (the authors' parametrization,
    [THEORY AZ-7.1][theory-az-7-1], [§2.4][theory-2-4])."""
    return jnp.sqrt(alpha * (1 + shape) / (1 - shape)), jnp.sqrt(alpha * (1 - shape) / (1 + shape))
