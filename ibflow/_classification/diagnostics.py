"""Low-rank and max-margin diagnostics of a `TwoLayerClassifier` ([THEORY §4.0–4.1][theory-4-0])."""

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
    """``srank(W) = ‖W‖_F² / ‖W‖₂²`` ∈ [1, rank W] ([THEORY §4.1][theory-4-1]). Jit/vmap/grad-able
    (grad needs a simple top singular value)."""
    W = _checks.real_array(W, "W", ndim=2)
    # Eigenvalues of the smaller Gram matrix are the squared singular values; a symmetric
    # eigensolver on the small Gram matrix costs far less than a batched SVD of W on CPU, and is
    # accurate to rounding for the largest one.
    gram = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    return jnp.trace(gram) / jnp.linalg.eigvalsh(gram)[-1]


def normalized_margins(model: TwoLayerClassifier, X: Float[ArrayLike, "n d"],
                       y: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
    """``qᵢ = yᵢ f(xᵢ; θ) / ‖θ‖^L`` with θ the trained parameters (``‖θ‖ = ‖W‖_F`` for the
    fixed-``a`` network, ``‖(W, a[, b])‖₂`` otherwise) and L = `model.homogeneity`. Scale invariant:
    ``qᵢ = yᵢ f(xᵢ; θ/‖θ‖)``; Kou et al. predict all qᵢ become equal ([THEORY §4.1][theory-4-1])."""
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

    With ``θ̂ = θ/‖θ‖``, a KKT direction is ``θ̂ = Σᵢ λᵢ yᵢ gᵢ`` with ``λ ≥ 0`` and ``gᵢ`` a Clarke
    subgradient of ``f(xᵢ; ·)`` at θ̂ ([THEORY §4.1][theory-4-1]): ``φ'(zⱼᵢ)`` is 1 or γ off the
    kink, and any value in ``[γ, 1]`` for a pair on it (``|zⱼᵢ|`` at most `KINK_TOLERANCE` of the
    largest
    ``|z|``). So a pair (j, i) on the kink contributes ``μⱼᵢ aⱼ yᵢ ∂zⱼᵢ/∂θ`` with
    ``γλᵢ ≤ μⱼᵢ ≤ λᵢ``. (An exact flow holds sliding pairs at ``z = 0``, [THEORY §8.2][theory-8-2];
    with ``φ'(0) = 1`` there the residual of a converging direction stalls: 0.13 instead of 0.015
    on the leaky classifier of tests/test_classification.py.)

    - `stationarity` = ``min ‖θ̂ − Σᵢ λᵢ yᵢ gᵢ‖₂`` over those λ and μ — the distance of the unit
      direction to the cone of the margin subgradients, i.e. the relative stationarity
      residual ``ε/‖θ̃‖`` of Lyu & Li's (ε, δ)-KKT point. Scale invariant; 0 at (the direction
      of) a KKT point. Without pairs on the kink it is a nonnegative least squares (scipy's
      `nnls`); with them a convex quadratic program (scipy's SLSQP, from the `nnls` solution
      with ``μ = γλ``).
    - `complementarity` = ``Σᵢ λ̃ᵢ (qᵢ/q_min − 1)`` at the rescaled point
      ``θ̃ = θ̂ q_min^{−1/L}`` (whose
      smallest margin is 1), with the λ that attains `stationarity` mapped to that scale
      (``λ̃ = λ q_min^{(L−2)/L}``): Lyu & Li's δ. Inf when some margin is ≤ 0.
    - `multipliers` (n,): ``λ̃``. `min_margin`: ``q_min = minᵢ yᵢ f(xᵢ; θ̂)``.
    - `kink_pairs`: the number of (neuron, example) pairs on the kink.
    """

    stationarity: float
    complementarity: float
    multipliers: np.ndarray
    min_margin: float
    kink_pairs: int = 0


#: A pre-activation at most this fraction of the largest |z| is on the kink (`KKTResidual`).
KINK_TOLERANCE = 1e-9


@eqx.filter_jit
def _margin_gradients(model, X, y):
    """θ̂, the margin gradients with ``φ' = γ`` on kink pairs (p × n), the extra columns
    ``(1 − γ) aⱼ yᵢ ∂zⱼᵢ/∂θ`` of every pair (p × n·m, the kink pairs are picked on the host),
    the kink mask (n, m) and the normalized margins."""
    norm = model.parameter_norm()
    z = jax.vmap(model.preactivations)(X)  # (n, m)
    kink = jnp.abs(z) <= KINK_TOLERANCE * jnp.max(jnp.abs(z))
    lo, hi = model.slope_bounds()
    slopes = jnp.where(kink, lo, jnp.where(z > 0, hi, lo))

    def flat(tree):
        return jnp.concatenate([v.ravel() for v in tree.trained().values()])

    def gradient(x, s):  # ∇_θ of Σⱼ aⱼ sⱼ zⱼ(x): the output's gradient with slopes s
        return flat(eqx.filter_grad(lambda mdl: mdl.output_with_slopes(x, s))(model))

    columns = jax.vmap(gradient)(X, slopes)  # (n, p)
    unit = (hi - lo) * jnp.eye(z.shape[1], dtype=z.dtype)
    extra = jax.vmap(lambda x: jax.vmap(lambda e: gradient(x, e))(unit))(X)  # (n, m, p)
    theta = flat(model)
    L = model.homogeneity
    # ∇f is (L−1)-homogeneous: ∇f(θ̂) = ∇f(θ)/‖θ‖^{L−1}.
    scale = y / norm ** (L - 1)
    A = (scale[:, None] * columns).T
    B = (scale[:, None, None] * extra).reshape(-1, theta.shape[0]).T
    q = y * jax.vmap(model)(X) / norm**L
    return theta / norm, A, B, kink, q


def _stationarity(theta, A, B, owner):
    """``min ‖θ − Aλ − Bν‖`` over ``λ ≥ 0``, ``0 ≤ νₖ ≤ λ_{owner(k)}``: (residual, λ)."""
    lam, res = scipy.optimize.nnls(A, theta)
    if B.shape[1] == 0:
        return res, lam
    n, k = A.shape[1], B.shape[1]
    M = np.concatenate([A, B], axis=1)
    G = np.concatenate([np.eye(n + k), np.concatenate(
        [np.eye(n)[owner], -np.eye(k)], axis=1)])  # x ≥ 0 and λ_owner − ν ≥ 0

    # ½‖Mx − θ‖² = ½xᵀGx − bᵀx + ½‖θ‖²: with the Gram matrix an iteration of SLSQP costs
    # (n + k)² flops, not two passes over the p × (n + k) matrix (0.03 s each at p = 78 400).
    gram, b, c = M.T @ M, M.T @ theta, 0.5 * theta @ theta

    def objective(x):
        gx = gram @ x
        return 0.5 * x @ gx - b @ x + c, gx - b

    out = scipy.optimize.minimize(
        objective, np.concatenate([lam, np.zeros(k)]), jac=True, method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda x: G @ x, "jac": lambda x: G}],
        options={"ftol": 1e-16, "maxiter": 1000})
    x = np.maximum(out.x, 0.0)
    return min(float(np.linalg.norm(M @ x - theta)), res), x[:n]


def kkt_residual(model: TwoLayerClassifier, X: Float[ArrayLike, "n d"],
                 y: Float[ArrayLike, " n"]) -> KKTResidual:
    """`KKTResidual` of one (unbatched) model, on the host (scipy; not jit-able). Cost: one
    (p × n) nonnegative least squares, p = #parameters, and with pairs on the kink one quadratic
    program in n + #pairs variables."""
    if model.first.ndim != 2:
        raise ValueError("kkt_residual takes one model; loop over a trajectory's points "
                         "(see kkt_residuals).")
    X, y = _checks.data(X, y)
    theta, A, B, kink, q = (np.asarray(v) for v in _margin_gradients(
        model, jnp.asarray(X), jnp.asarray(y)))
    pairs = np.flatnonzero(kink.ravel())  # index i·m + j
    res, lam = _stationarity(theta, A, B[:, pairs], pairs // kink.shape[1])
    qmin = float(q.min())
    L = model.homogeneity
    if qmin > 0:
        lam_t = lam * qmin ** ((L - 2) / L)
        comp = float(np.sum(lam_t * (q / qmin - 1.0)))
    else:
        lam_t, comp = lam, float("inf")
    return KKTResidual(stationarity=float(res), complementarity=comp, multipliers=lam_t,
                       min_margin=qmin, kink_pairs=int(pairs.size))


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
