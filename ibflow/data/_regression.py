"""Sparse regression, the "Woodworth et al." setting of [THEORY §2.8][theory-2-8]."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks


class RegressionData(eqx.Module):
    """Training and test sets of a regression problem with a known teacher ``w_star``.

    `X`, `y`: training inputs (n, d) and noisy targets. `X_test`, `y_test`: noiseless test set.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    X_test: Float[Array, "m d"]
    y_test: Float[Array, " m"]
    w_star: Float[Array, " d"]

    def test_error(self, w: Float[ArrayLike, "*b d"]) -> Float[Array, "*b"]:
        """Population error of a linear predictor: the test MSE ``mean((X_test w − y_test)²)``
        ([THEORY §2.8][theory-2-8]). Broadcasts over leading batch dimensions of ``w``."""
        return jnp.mean((jnp.asarray(w) @ self.X_test.T - self.y_test) ** 2, axis=-1)


def regression_arrays(data) -> tuple[Array, Array, Array, Array] | None:
    """``(X, y, X_test, y_test)`` of a `RegressionData`, None for anything else (a sweep's
    ``data`` may also be an ``(X, y)`` tuple)."""
    if isinstance(data, RegressionData):
        return data.X, data.y, data.X_test, data.y_test
    return None


def sparse_regression(
    key: PRNGKeyArray, n: int = 100, d: int = 1000, k: int = 5, noise: float = 0.1,
    n_test: int = 2000,
) -> RegressionData:
    """[THEORY §2.8][theory-2-8]: ``x ~ N(0, I_d)``, a k-sparse teacher with entries ``1/√k`` on a
    uniformly random support (so ``‖w*‖₂ = 1``), training labels ``<w*, x> + ε`` with
    ``ε ~ N(0, noise²)``
    (`noise` is the standard deviation: 0.1 is the paper's variance 0.01), and a noiseless test set.
    """
    for name, v in dict(n=n, d=d, k=k, n_test=n_test).items():
        _checks.width(v, name)
    if k > d:
        raise ValueError(f"sparsity k={k} exceeds the dimension d={d}.")
    noise = _checks.real_scalar(noise, "noise (a standard deviation)", nonnegative=True)
    kx, ks, ke, kt = jax.random.split(key, 4)
    support = jax.random.choice(ks, d, (k,), replace=False)
    w_star = jnp.zeros(d).at[support].set(1.0 / jnp.sqrt(k))
    X = jax.random.normal(kx, (n, d))
    X_test = jax.random.normal(kt, (n_test, d))
    y = X @ w_star + noise * jax.random.normal(ke, (n,))
    return RegressionData(X=X, y=y, X_test=X_test, y_test=X_test @ w_star, w_star=w_star)
