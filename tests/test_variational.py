"""Variational solvers [LM-G], [LM-B] against independent infinite-width references
(kernel / Bregman projections by Gauss–Legendre quadrature over b, both branches w = ±1)."""

import numpy as np
import pytest

import ibflow as ib

X = np.array([-0.8, -0.3, 0.2, 0.7])
H = np.array([0.2, -0.1, 0.1, 0.3])
GRID = np.linspace(-1.5, 1.5, 301)


def _quadrature(half_width, kinks, order=30, panels=200):
    """Composite Gauss–Legendre nodes/weights for ∫ · db/(2B) on [−B, B], split at the kinks."""
    br = np.unique(np.concatenate([[-half_width, half_width], kinks, -kinks]))
    br = br[np.abs(br) <= half_width]
    g, gw = np.polynomial.legendre.leggauss(order)
    nodes, weights = [], []
    for lo, hi in zip(br[:-1], br[1:]):
        edges = np.linspace(lo, hi, max(2, int(panels * (hi - lo) / (2 * half_width)) + 1))
        for a, c in zip(edges[:-1], edges[1:]):
            nodes.append((a + c) / 2 + (c - a) / 2 * g)
            weights.append((c - a) / 2 * gw)
    return np.concatenate(nodes), np.concatenate(weights) / (2 * half_width)


def _features(x, b, act):
    s = (lambda z: np.maximum(z, 0.0)) if act == "relu" else np.abs
    return np.concatenate([s(x[:, None] - b[None, :]), s(-x[:, None] - b[None, :])], axis=1)


def _kernel_solution(act, half_width=2.0):
    """Min-norm infinite-width random-feature interpolant:
    E[α²] minimal s.t. E[α σ(wx_i − b)] = h_i."""
    b, wq = _quadrature(half_width, X)
    P = 0.5 * np.concatenate([wq, wq])  # w = ±1 with probability ½ each
    F = _features(X, b, act)
    lam = np.linalg.solve((F * P) @ F.T, H)
    return (_features(GRID, b, act) * P) @ F.T @ lam


def test_relu_variational_is_min_norm_random_features():
    """docs/theory [LM-G]: argmin 𝒢₁+𝒢₂+𝒢₃ = infinite-width min-‖Δa‖ interpolant (2.7e-5
    there)."""
    sol = ib.relu_variational(X, H, bias=ib.UniformBias(2.0), num_grid=1500)
    np.testing.assert_allclose(np.asarray(sol(X)), H, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol(GRID)), _kernel_solution("relu"), atol=2e-5)
    # 𝒢₂ and 𝒢₃ matter: the 𝒢₁-only (natural-spline-like) interpolant is far from it.
    assert np.max(np.abs(np.asarray(sol(GRID)) - np.interp(GRID, X, H))) > 1e-2


def test_abs_variational_quadratic_is_kernel_interpolant():
    """φ = x²: [LM-B] is ¼∫h''²/p_B, the RKHS norm of the |·| random-feature kernel."""
    sol = ib.abs_variational(X, H, potential=ib.QuadraticPotential(), num_grid=1500)
    assert sol.status == ib.Status.converged
    np.testing.assert_allclose(np.asarray(sol(GRID)), _kernel_solution("abs"), atol=2e-5)


def test_abs_variational_quartic_is_bregman_projection():
    """φ = x⁴+x²: [LM-B] equals the infinite-width Bregman projection
    min E[D_φ(α(w,b), 0)] s.t. E[α |wx_i − b|] = h_i, solved in the dual by Newton over λ ∈ ℝᵐ
    (α = (φ')⁻¹(φ'(0) + Σλ_i|wx_i − b|), numpy bisection for the inverse)."""
    b, wq = _quadrature(2.0, X)
    P = 0.5 * np.concatenate([wq, wq])
    F = _features(X, b, "abs")
    dphi = lambda u: 4 * u**3 + 2 * u

    def alpha(lam):
        z = F.T @ lam
        lo, hi = np.full_like(z, -20.0), np.full_like(z, 20.0)
        for _ in range(120):
            mid = 0.5 * (lo + hi)
            low = dphi(mid) < z
            lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
        return 0.5 * (lo + hi)

    lam = np.zeros(len(X))
    for _ in range(40):
        a = alpha(lam)
        r = (F * P) @ a - H
        J = (F * P / (12 * a**2 + 2)) @ F.T
        lam -= np.linalg.solve(J, r)
    assert np.max(np.abs(r)) < 1e-12
    ref = (_features(GRID, b, "abs") * P) @ alpha(lam)
    sol = ib.abs_variational(X, H, potential=ib.QuarticPotential(), num_grid=3000)
    assert sol.status == ib.Status.converged
    np.testing.assert_allclose(np.asarray(sol(GRID)), ref, atol=1e-5)
    # the potential matters (scaled case): quartic ≠ quadratic solution
    quad = ib.abs_variational(X, H, potential=ib.QuadraticPotential(), num_grid=3000)
    assert np.max(np.abs(np.asarray(quad(GRID)) - ref)) > 1e-2
    # even split of the two branches, α(1, c) = α(−1, −c) = h''(c)/(2p_B(c)) ([LM-B])
    n = len(b)
    np.testing.assert_allclose(b, -b[::-1], atol=1e-12)  # symmetric nodes: b_q = −b_{N−q}
    np.testing.assert_allclose(alpha(lam)[:n], alpha(lam)[n:][::-1], atol=1e-9)


def test_relu_variational_gaussian_bias_is_min_norm_random_features():
    bias = ib.GaussianBias(1.0)
    sol = ib.relu_variational(X, H, bias=bias, num_grid=2000)
    g, gw = np.polynomial.legendre.leggauss(40)
    edges = np.unique(np.concatenate([np.linspace(-8, 8, 321), X, -X]))
    b = np.concatenate([(a + c) / 2 + (c - a) / 2 * g for a, c in zip(edges[:-1], edges[1:])])
    wq = np.concatenate([(c - a) / 2 * gw for a, c in zip(edges[:-1], edges[1:])])
    wq = wq * np.exp(-0.5 * b**2) / np.sqrt(2 * np.pi)
    P = 0.5 * np.concatenate([wq, wq])
    F = _features(X, b, "relu")
    lam = np.linalg.solve((F * P) @ F.T, H)
    ref = (_features(GRID, b, "relu") * P) @ F.T @ lam
    np.testing.assert_allclose(np.asarray(sol(GRID)), ref, atol=1e-4)


def test_variational_bad_input():
    with pytest.raises(ValueError):
        ib.relu_variational(X, H[:3])
    with pytest.raises(ValueError):
        ib.abs_variational(X, H, potential="x^2")
    with pytest.raises(ValueError):
        ib.relu_variational(X, H, num_grid=3)
