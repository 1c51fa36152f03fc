"""Low-rank and max-margin diagnostics of a `TwoLayerClassifier` (THEORY §4.0–4.1)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from jaxtyping import Array, ArrayLike, Float

from .. import _checks
from .._models.classifier import TwoLayerClassifier
from .._solution import Trajectory


def stable_rank(W: Float[ArrayLike, "m d"]) -> Float[Array, ""]:
    """``srank(W) = ‖W‖_F² / ‖W‖₂²`` ∈ [1, rank W] (THEORY §4.1). Jit/vmap/grad-able (grad needs
    a simple top singular value)."""
    W = _checks.real_array(W, "W", ndim=2)
    # Eigenvalues of the smaller Gram matrix are the squared singular values; this is ~50× faster
    # than a batched SVD on CPU and accurate to rounding for the largest one.
    gram = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    return jnp.trace(gram) / jnp.linalg.eigvalsh(gram)[-1]


def normalized_margins(model: TwoLayerClassifier, X: Float[ArrayLike, "n d"],
                       y: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
    """``qᵢ = yᵢ f(xᵢ; θ) / ‖θ‖^L`` with θ the trained parameters (``‖θ‖ = ‖W‖_F`` for the
    fixed-``a`` network, ``‖(W, a[, b])‖₂`` otherwise) and L = `model.homogeneity`. Scale invariant:
    ``qᵢ = yᵢ f(xᵢ; θ/‖θ‖)``; Kou et al. predict all qᵢ become equal (THEORY §4.1)."""
    X, y = _checks.data(X, y)
    return y * jax.vmap(model)(X) / model.parameter_norm() ** model.homogeneity


class ClassifierDiagnostics(eqx.Module):
    """`classifier_diagnostics` output (each field gains a leading axis when vmapped).

    `norm`: ``‖θ‖`` (trained parameters). `first_norm`: ``‖W‖_F``. `stable_rank`: of W.
    `margins` (n,): normalized margins ``qᵢ``. `min_margin`: ``minᵢ qᵢ``.
    `margin_spread`: ``(maxᵢ qᵢ − minᵢ qᵢ)/maxᵢ |qᵢ|`` — 0 when all margins are equal, > 1 while
    some point is misclassified.
    """

    norm: Float[Array, ""]
    first_norm: Float[Array, ""]
    stable_rank: Float[Array, ""]
    margins: Float[Array, " n"]
    min_margin: Float[Array, ""]
    margin_spread: Float[Array, ""]


def classifier_diagnostics(model: TwoLayerClassifier, X: Float[ArrayLike, "n d"],
                           y: Float[ArrayLike, " n"]) -> ClassifierDiagnostics:
    """Norms, stable rank of W and normalized margins of one model. Jit/vmap-able."""
    q = normalized_margins(model, X, y)
    return ClassifierDiagnostics(
        norm=model.parameter_norm(), first_norm=jnp.linalg.norm(model.first),
        stable_rank=stable_rank(model.first), margins=q, min_margin=jnp.min(q),
        margin_spread=(jnp.max(q) - jnp.min(q)) / jnp.max(jnp.abs(q)))


@eqx.filter_jit
def trajectory_diagnostics(trajectory: Trajectory, X: Float[ArrayLike, "n d"],
                           y: Float[ArrayLike, " n"]) -> ClassifierDiagnostics:
    """`classifier_diagnostics` at every point of a trajectory (fields gain a leading T axis;
    points past the end of a solve are nan/inf)."""
    return jax.vmap(classifier_diagnostics, in_axes=(0, None, None))(trajectory.models, X, y)


class KKTResidual(eqx.Module):
    """How far a model's direction is from a KKT point of ``min ½‖θ‖² s.t. yᵢ f(xᵢ; θ) ≥ 1``.

    With ``θ̂ = θ/‖θ‖`` and ``A = [yᵢ ∇_θ f(xᵢ; θ̂)]ᵢ`` (one column per example; ``φ'(0) = 1``):

    - `stationarity` = ``min_{λ ≥ 0} ‖θ̂ − Aλ‖₂`` — the distance of the unit direction to the cone of
      the margin gradients, i.e. the relative stationarity residual ``ε/‖θ̃‖`` of Lyu & Li's
      (ε, δ)-KKT point. Scale invariant; 0 at (the direction of) a KKT point.
    - `complementarity` = ``Σᵢ λ̃ᵢ (qᵢ/q_min − 1)`` at the rescaled point
      ``θ̃ = θ̂ q_min^{−1/L}`` (whose
      smallest margin is 1), with the λ that attains `stationarity` mapped to that scale
      (``λ̃ = λ q_min^{(L−2)/L}``): Lyu & Li's δ. Inf when some margin is ≤ 0.
    - `multipliers` (n,): ``λ̃``. `min_margin`: ``q_min = minᵢ yᵢ f(xᵢ; θ̂)``.
    """

    stationarity: float
    complementarity: float
    multipliers: np.ndarray
    min_margin: float


@eqx.filter_jit
def _margin_gradients(model, X, y):
    norm = model.parameter_norm()
    grads = eqx.filter_vmap(eqx.filter_grad(lambda mdl, x: mdl(x)), in_axes=(None, 0))(model, X)
    columns = jnp.concatenate(
        [g.reshape(X.shape[0], -1) for g in grads.trained().values()], axis=1)
    theta = jnp.concatenate([v.ravel() for v in model.trained().values()])
    L = model.homogeneity
    # ∇f is (L−1)-homogeneous: ∇f(θ̂) = ∇f(θ)/‖θ‖^{L−1}.
    A = (y[:, None] * columns / norm ** (L - 1)).T
    q = y * jax.vmap(model)(X) / norm**L
    return theta / norm, A, q


def kkt_residual(model: TwoLayerClassifier, X: Float[ArrayLike, "n d"],
                 y: Float[ArrayLike, " n"]) -> KKTResidual:
    """`KKTResidual` of one (unbatched) model; the nonnegative least squares is scipy's
    Lawson–Hanson `nnls` on the host (not jit-able). Cost: one (p × n) NNLS, p = #parameters."""
    if model.first.ndim != 2:
        raise ValueError("kkt_residual takes one model; loop over a trajectory's points "
                         "(see kkt_residuals).")
    X, y = _checks.data(X, y)
    theta, A, q = (np.asarray(v) for v in _margin_gradients(model, jnp.asarray(X),
                                                            jnp.asarray(y)))
    lam, res = scipy.optimize.nnls(A, theta)
    qmin = float(q.min())
    L = model.homogeneity
    if qmin > 0:
        lam_t = lam * qmin ** ((L - 2) / L)
        comp = float(np.sum(lam_t * (q / qmin - 1.0)))
    else:
        lam_t, comp = lam, float("inf")
    return KKTResidual(stationarity=float(res), complementarity=comp, multipliers=lam_t,
                       min_margin=qmin)


def kkt_residuals(trajectory: Trajectory, X: Float[ArrayLike, "n d"],
                  y: Float[ArrayLike, " n"]) -> np.ndarray:
    """`KKTResidual.stationarity` at every valid point of an (unbatched-member) trajectory; nan at
    points past the end of the solve. Host loop over the points."""
    valid = np.asarray(trajectory.valid)
    out = np.full(valid.shape, np.nan)
    for k in np.flatnonzero(valid):
        model = jax.tree_util.tree_map(lambda v, k=k: v[k], trajectory.models)
        out[k] = kkt_residual(model, X, y).stationarity
    return out
