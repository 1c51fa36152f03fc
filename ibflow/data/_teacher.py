"""Teacher–student regression ([THEORY §8.3][theory-8-3]): Gaussian inputs labelled by a teacher
network, for studies of the limits a student reaches (interpolating or stationary)."""

import equinox as eqx
import jax
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _checks
from .._activations.smooth import Tanh
from .._models.mlp import MLP


class TeacherStudentData(eqx.Module):
    """Training and test sets labelled by a known `teacher`.

    `X` (n, d), `y` (n,): inputs ``x ~ N(0, I_d)`` and labels ``teacher(x) + ε``.
    `X_test` (n_test, d), `y_test` (n_test,): fresh inputs, noiseless labels.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    X_test: Float[Array, "m d"]
    y_test: Float[Array, " m"]
    teacher: eqx.Module


def teacher_student(
    key: PRNGKeyArray, *, n: int, d: int, teacher: eqx.Module | None = None,
    noise: float = 0.0, n_test: int = 1000,
) -> TeacherStudentData:
    """Gaussian inputs ``x ~ N(0, I_d)`` labelled by ``teacher(x)`` plus ``N(0, noise²)`` noise
    (`noise` a standard deviation; the test labels are noiseless).

    **Arguments:** `key`; `n` training and `n_test` test examples; `d` the input dimension;
    `teacher` any module mapping one example (d,) to a scalar, e.g. an `ibflow.MLP`; default: a
    random tanh MLP with one hidden layer of 4 neurons, scale 1 and shape 0
    (``MLP.from_scale_shape(1.0, dim=d, widths=(4,), activation=Tanh(), bias=True)``, drawn
    from `key`).
    """
    n, d, n_test = _checks.width(n, "n"), _checks.width(d, "d"), _checks.width(n_test, "n_test")
    noise = _checks.real_scalar(noise, "noise (a standard deviation)", nonnegative=True)
    kt, kx, ke, kxt = jax.random.split(key, 4)
    if teacher is None:
        teacher = MLP.from_scale_shape(1.0, dim=d, widths=(4,), activation=Tanh(), bias=True,
                                       key=kt)
    if not callable(teacher):
        raise ValueError(f"teacher must be a module mapping one example to a scalar; got "
                         f"{type(teacher).__name__}.")
    X = jax.random.normal(kx, (n, d))
    X_test = jax.random.normal(kxt, (n_test, d))
    outputs = jax.vmap(teacher)(X)
    if outputs.shape != (n,):
        raise ValueError(f"teacher must return a scalar per example; got outputs of shape "
                         f"{outputs.shape} for {n} examples.")
    y = outputs + noise * jax.random.normal(ke, (n,))
    return TeacherStudentData(X=X, y=y, X_test=X_test, y_test=jax.vmap(teacher)(X_test),
                              teacher=teacher)


__all__ = ["TeacherStudentData", "teacher_student"]
