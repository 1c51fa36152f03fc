"""Binary classification data: the Gaussian mixture of [THEORY §4.0][theory-4-0] and the
near-orthogonality diagnostic of [THEORY §4.1][theory-4-1]."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .. import _checks


class ClassificationData(eqx.Module):
    """A binary classification set with labels in {−1, +1}.

    `X` (n, d), `y` (n,): training set. `X_test` (n_test, d), `y_test` (n_test,): test set (may
    have n_test = 0). `mean`: the class mean μ of the Gaussian mixture (d,), None for real data.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    X_test: Float[Array, "n_test d"]
    y_test: Float[Array, " n_test"]
    mean: Float[Array, " d"] | None = None


def gaussian_mixture(
    key: PRNGKeyArray, n: int = 10, d: int = 784, *, sigma_p: float = 0.01, sigma_e: float = 1.0,
    n_test: int = 1000, balanced: bool = True,
) -> ClassificationData:
    """[THEORY §4.0][theory-4-0] (after Kou et al. 2023): ``xᵢ = yᵢ μ + zᵢ`` with
    ``μ ~ N(0, σ_p² I_d)`` drawn once, ``zᵢ ~ N(0, σ_e² I_d)`` and ``yᵢ`` Rademacher. The seed uses
    n = 10, d = 784, σ_p = 0.01,
    σ_e = 1, so ``‖μ‖² ≈ 0.08 ≪ σ_e² d = 784``: nearly orthogonal noise with a tiny class signal.

    `balanced`: exactly ⌈n/2⌉ positive labels in random order (so both classes exist even for
    tiny n)
    instead of i.i.d. signs. The test set (same μ) has i.i.d. labels.
    """
    for name, v in dict(n=n, d=d).items():
        _checks.width(v, name)
    n_test = _checks.width(n_test, "n_test", low=0)
    sigma_p = _checks.real_scalar(sigma_p, "sigma_p", nonnegative=True)
    sigma_e = _checks.real_scalar(sigma_e, "sigma_e", positive=True)
    km, kz, ky, kzt, kyt = jax.random.split(key, 5)
    mu = sigma_p * jax.random.normal(km, (d,))
    if balanced:
        y = jax.random.permutation(ky, jnp.where(jnp.arange(n) < (n + 1) // 2, 1.0, -1.0))
    else:
        y = jnp.where(jax.random.bernoulli(ky, 0.5, (n,)), 1.0, -1.0)
    y_test = jnp.where(jax.random.bernoulli(kyt, 0.5, (n_test,)), 1.0, -1.0)
    X = y[:, None] * mu + sigma_e * jax.random.normal(kz, (n, d))
    X_test = y_test[:, None] * mu + sigma_e * jax.random.normal(kzt, (n_test, d))
    return ClassificationData(X=X, y=y, X_test=X_test, y_test=y_test, mean=mu)


def near_orthogonality(X: Float[ArrayLike, "n d"]) -> Float[Array, ""]:
    """``n · max_{i≠k} |⟨xᵢ, x_k⟩| / minᵢ ‖xᵢ‖²`` ([THEORY §4.1][theory-4-1]).

    Frei et al.'s condition ``‖xᵢ‖² ≥ C n max_{k≠i} |⟨xᵢ, x_k⟩|`` holds with constant C exactly when
    this number is ≤ 1/C: small values (≪ 1) mean nearly orthogonal data. For the seed's mixture
    (n = 10, d = 784) it is about ``n σ_e √(2 log(n²)) / (σ_e √d)`` ≈ 1 (a little below or above
    1 from draw to draw), i.e. only C ≈ 1; for the digits it is ≈ 10². Jit/vmap-able.
    """
    X = _checks.finite(_checks.real_array(X, "X", ndim=2), "X")
    if X.shape[0] < 2:
        raise ValueError(f"X must have shape (n, d) with n >= 2; got {tuple(X.shape)}.")
    gram = X @ X.T
    n = X.shape[0]
    off = jnp.where(jnp.eye(n, dtype=bool), 0.0, jnp.abs(gram))
    return n * jnp.max(off) / jnp.min(jnp.diag(gram))


def binary_task(
    images, labels, *, positive, negative, n: int | None = None, n_test: int = 0,
    seed: int = 0, scale: float = 255.0, center: bool = False,
) -> ClassificationData:
    """A ±1 task from a labelled image set (host-side numpy, e.g. from `load_mnist`).

    Examples whose label is in `positive` get y = +1, in `negative` y = −1, the rest are dropped.
    Images are flattened and divided by `scale` (255 for 8-bit images); `center=True` subtracts
    the training mean (which makes the inputs closer to orthogonal). `n` training and `n_test`
    test examples are drawn without replacement (``numpy.random.default_rng(seed)``), balanced
    between the classes when possible; ``n=None`` keeps all the selected examples for training.
    """
    import numpy as np

    images, labels = np.asarray(images), np.asarray(labels)
    if images.dtype.kind not in "biuf" or images.ndim < 2 or images.shape[0] == 0:
        raise ValueError(f"images must be a non-empty real array of shape (N, ...); got dtype "
                         f"{images.dtype} and shape {images.shape}.")
    if images.dtype.kind == "f" and not np.all(np.isfinite(images)):
        raise ValueError("images contains non-finite values (nan or inf).")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"labels must have shape (N,) with N = {images.shape[0]} images; got "
                         f"{labels.shape}.")
    scale = float(_checks.real_scalar(scale, "scale", positive=True))
    for name, v in dict(n_test=n_test, seed=seed).items():
        _checks.width(v, name, low=0)
    if n is not None:
        _checks.width(n, "n")
    positive, negative = np.atleast_1d(positive), np.atleast_1d(negative)
    if np.intersect1d(positive, negative).size:
        raise ValueError("positive and negative classes overlap.")
    keep = np.isin(labels, positive) | np.isin(labels, negative)
    X = images[keep].reshape(int(keep.sum()), -1).astype(np.float64) / scale
    y = np.where(np.isin(labels[keep], positive), 1.0, -1.0)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    # Interleave the classes so that any prefix is balanced.
    pos, neg = order[y[order] > 0], order[y[order] < 0]
    k = min(len(pos), len(neg))
    order = np.concatenate([np.stack([pos[:k], neg[:k]], 1).ravel(), pos[k:], neg[k:]])
    n = len(y) - n_test if n is None else n
    if n < 2 or n + n_test > len(y):
        raise ValueError(f"asked for n={n} training and n_test={n_test} test examples but the "
                         f"selected classes have {len(y)}.")
    tr, te = order[:n], order[n:n + n_test]
    if center:
        X = X - X[tr].mean(axis=0)
    return ClassificationData(X=jnp.asarray(X[tr]), y=jnp.asarray(y[tr]), X_test=jnp.asarray(X[te]),
                              y_test=jnp.asarray(y[te]))
