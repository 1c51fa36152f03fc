"""Abstract scalar potential φ of a separable mirror map ([THEORY §1][theory-1],
[§3.0][theory-3-0]).

A potential here is the one-dimensional, strictly convex ``φ: ℝ → ℝ``; the parameter-space
potential is the separable sum ``Φ(θ) = Σ_j φ(θ_j − θ_j(0))`` or its width-scaled variant (see
``scaling.py``). Every method acts elementwise on arrays of any shape, so the mirror flow's
velocity ``−η ∇L / Φ''`` needs no matrix inverse.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

#: Newton iterations used by ``newton_inverse`` (quadratic convergence: far more than needed).
NEWTON_ITERATIONS = 60


class AbstractPotential(eqx.Module):
    """A strictly convex ``C²`` scalar potential φ with ``φ'' > 0``, evaluated elementwise."""

    @abc.abstractmethod
    def __call__(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """``φ(x)`` elementwise."""

    @abc.abstractmethod
    def derivative(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """``φ'(x)`` elementwise (the mirror map)."""

    @abc.abstractmethod
    def second_derivative(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """``φ''(x) > 0`` elementwise (the Hessian of the separable Φ)."""

    @abc.abstractmethod
    def inverse_derivative(self, z: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """``(φ')⁻¹(z)`` elementwise: the inverse mirror map (discrete mirror descent, dual
        solvers). Closed form where one exists, else ``newton_inverse``."""

    def bregman(self, x: Float[ArrayLike, "*s"], x0: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        """Bregman divergence ``D_φ(x, x0) = φ(x) − φ(x0) − φ'(x0)(x − x0) ≥ 0``
        ([THEORY §1][theory-1])."""
        x, x0 = jnp.asarray(x, dtype=float), jnp.asarray(x0, dtype=float)
        return self(x) - self(x0) - self.derivative(x0) * (x - x0)


def newton_inverse(potential: AbstractPotential, z: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
    """Solve ``φ'(x) = z`` elementwise by safeguarded Newton.

    φ' is strictly increasing, so a bracket ``[lo, hi]`` with ``φ'(lo) ≤ z ≤ φ'(hi)`` is grown by
    doubling and then shrunk; a Newton step leaving the bracket is replaced by bisection. This
    converges for any strictly convex φ (including ones whose φ' is neither convex nor concave).
    """
    z = jnp.asarray(z, dtype=float)
    d0 = potential.derivative(jnp.zeros_like(z))
    x0 = (z - d0) / potential.second_derivative(jnp.zeros_like(z))

    def grow(carry):
        lo, hi, width, _ = carry
        lo = jnp.where(potential.derivative(lo) > z, lo - width, lo)
        hi = jnp.where(potential.derivative(hi) < z, hi + width, hi)
        return lo, hi, 2 * width, jnp.any((potential.derivative(lo) > z)
                                           | (potential.derivative(hi) < z))

    width = 1.0 + jnp.abs(x0)
    start = (x0 - width, x0 + width, width, jnp.array(True))
    lo, hi, _, _ = jax.lax.while_loop(lambda c: c[3], grow, start)

    def step(_, carry):
        x, lo, hi = carry
        r = potential.derivative(x) - z
        lo = jnp.where(r < 0, x, lo)
        hi = jnp.where(r > 0, x, hi)
        newton = x - r / potential.second_derivative(x)
        inside = (newton > lo) & (newton < hi)
        return jnp.where(inside, newton, 0.5 * (lo + hi)), lo, hi

    x, _, _ = jax.lax.fori_loop(0, NEWTON_ITERATIONS, step, (jnp.clip(x0, lo, hi), lo, hi))
    return x
