"""Smooth activations (no kinks; not positively homogeneous)."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .base import AbstractActivation


class Tanh(AbstractActivation):
    """``σ(z) = tanh z``."""

    positively_homogeneous = False

    def __call__(self, z):
        return jnp.tanh(z)


class Softplus(AbstractActivation):
    """``σ(z) = log(1 + e^z)``."""

    positively_homogeneous = False

    def __call__(self, z):
        return jax.nn.softplus(z)


class FunctionActivation(AbstractActivation):
    """Any differentiable ``fn`` (a plain function or an Equinox module with array fields, to
    sweep its parameters without recompiling)."""

    fn: Callable
    positively_homogeneous = False

    def __check_init__(self):
        if not callable(self.fn):
            raise ValueError("FunctionActivation(fn): fn must be callable.")

    def __call__(self, z):
        return self.fn(z)
