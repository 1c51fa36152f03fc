"""The structured chord root finder of the implicit tail (`ibflow._tail.chord`): Diffrax's
placeholder Jacobian is skipped, and the solve is unchanged. Reference: the matrix exponential
(scipy) of a linear ODE."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from ibflow._tail.chord import StructuredChord, linearization, with_structured_chord


class _Inverse(eqx.Module):
    matrix: jax.Array

    def __call__(self, r):
        return self.matrix @ r


class _Jacobian(eqx.Module):
    A: jax.Array

    def factor(self, c):  # (I − c F')⁻¹ with F' = −A
        return _Inverse(jnp.linalg.inv(jnp.eye(self.A.shape[0]) + c * self.A))


class _Linear(eqx.Module):
    """``dy/dt = −A y`` with its exact Jacobian as the structure."""

    A: jax.Array

    def linearization(self, t, y, args):
        # (tanh marks each evaluation in the traced program; the value is exactly A.)
        return _Jacobian(self.A * (1.0 + 0.0 * jnp.tanh(t)))


def _problem():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 6))
    A = B @ B.T + np.diag(np.logspace(0, 4, 6))  # stiff
    return A, rng.standard_normal(6)


@pytest.mark.parametrize("solver", [dfx.Kvaerno3(), dfx.Kvaerno4(), dfx.Kvaerno5()])
def test_placeholder_jacobian_is_skipped_and_the_solve_unchanged(solver):
    A, y0 = _problem()
    chord = StructuredChord(dynamics=_Linear(jnp.asarray(A)), rtol=1e-10, atol=1e-10)
    term = dfx.ODETerm(lambda t, y, args: -jnp.asarray(A) @ y)

    def solve(s, y):
        return dfx.diffeqsolve(term, s, 0.0, 1.0, None, y, stepsize_controller=dfx.PIDController(
            rtol=1e-10, atol=1e-10), max_steps=10_000)

    marked = with_structured_chord(solver, chord)
    # The engine's way: the placeholder's shapes given, as the engine's structure query
    # computes them (then the placeholder traces no linearization at all).
    shaped = with_structured_chord(solver, StructuredChord(
        dynamics=chord.dynamics, rtol=1e-10, atol=1e-10, structure=jax.eval_shape(
            lambda: linearization(chord.dynamics, jnp.zeros(()), jnp.asarray(y0), None))))
    plain = eqx.tree_at(lambda s: s.root_finder, solver, chord)
    assert type(marked).__name__ == type(solver).__name__ and isinstance(marked, type(solver))
    # One linearization fewer in the traced step: one call site of the linearization (behind
    # its jit boundary, `ibflow._tail.chord.linearization`) where the plain solver has two.
    evaluations = [str(jax.make_jaxpr(lambda y, s=s: solve(s, y).ys)(y0)).count(
        "name=linearization") for s in (marked, shaped, plain)]
    assert evaluations == [1, 1, 2], evaluations
    # The placeholder is the identity either way (it serves an explicit first stage): the same
    # steps, the same end.
    sols = [jax.jit(lambda y, s=s: solve(s, y))(y0) for s in (marked, shaped, plain)]
    assert [int(s.stats["num_steps"]) for s in sols] == [int(sols[-1].stats["num_steps"])] * 3
    ends = [np.asarray(s.ys[-1]) for s in sols]
    np.testing.assert_array_equal(ends[0], ends[2])
    np.testing.assert_array_equal(ends[1], ends[2])
    np.testing.assert_allclose(ends[0], scipy.linalg.expm(-A) @ y0, rtol=1e-7, atol=1e-9)
