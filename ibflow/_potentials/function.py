"""A user-given scalar potential; derivatives by automatic differentiation."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .base import AbstractPotential, newton_inverse


class FunctionPotential(AbstractPotential):
    """``φ = fn`` for a user function ``fn: scalar → scalar`` (strictly convex, ``C²``).

    ``φ'`` and ``φ''`` come from ``jax.grad`` applied elementwise; ``(φ')⁻¹`` from safeguarded
    Newton. Example: ``FunctionPotential(lambda x: jnp.log(jnp.cosh(x)) + x**2)``.
    """

    fn: Callable

    def __check_init__(self):
        if not callable(self.fn):
            raise ValueError("FunctionPotential(fn): fn must be a callable scalar -> scalar.")

    def _elementwise(self, f, x):
        x = jnp.asarray(x, dtype=float)
        return jnp.vectorize(f)(x)

    def __call__(self, x):
        return self._elementwise(self.fn, x)

    def derivative(self, x):
        return self._elementwise(jax.grad(self.fn), x)

    def second_derivative(self, x):
        return self._elementwise(jax.grad(jax.grad(self.fn)), x)

    def inverse_derivative(self, z):
        return newton_inverse(self, z)
