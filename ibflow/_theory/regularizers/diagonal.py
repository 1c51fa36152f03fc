"""Implicit regularizer of the two-layer diagonal linear network: Theorem 1 and its biased form
([THEORY §2.3][theory-2-3] [AZ-T1][theory-az-t1], [AZ-A][theory-az-a], [AZ-7.1][theory-az-7-1])."""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ... import _checks
from ..._models._init import checked_scale_shape
from ._stable import asinh_ratio, scaled_cosh_minus_one, scaled_sinh
from .base import AbstractLegendreRegularizer
from .quadratic import WeightedL2Norm


class DiagonalNetRegularizer(AbstractLegendreRegularizer):
    r"""``Q(w) = Σᵢ q_{kᵢ}(wᵢ) − (wᵢ/2)·arcsinh(2w₀ᵢ/kᵢ)`` ([THEORY AZ-T1][theory-az-t1],
    [AZ-A][theory-az-a]) with

    ``q_k(x) = (k/4)[1 − sqrt(1 + 4x²/k²) + (2x/k) arcsinh(2x/k)]``.

    Invariant form (what is implemented): ``∇Q(w) = ½[arcsinh(2w/k) − arcsinh(2w₀/k)]``, so
    ``(∇Q)⁻¹(z) = (k/2) sinh(2z + φ)`` with ``φ = arcsinh(2w₀/k)``, and the convex conjugate is
    ``Q*(z) = (k/4)(cosh(2z + φ) − 1)``. Every formula is evaluated in a form that neither
    overflows nor cancels for small ``k`` or large arguments (products ``c·sinh`` are formed as
    ``exp(log c + |u|)``; [THEORY §2.3][theory-2-3] solver tip). ``Q`` is strictly convex and
    ``∇Q(w₀) = 0``.

    **Fields:**
    - `k`: (d,) per-coordinate ``kᵢ > 0``; ``kᵢ = 2(u₀ᵢ² + v₀ᵢ²)`` for unbiased initialization,
      ``kᵢ = 4αᵢ(1 + sᵢ²)/(1 − sᵢ²)`` in scale/shape form.
    - `w0`: (d,) the initial predictor ``w(0)`` (zeros for unbiased initialization).

    Limits ([THEORY §2.3][theory-2-3]): for ``k → ∞`` the minimizer approaches that of
    `ntk_limit` with relative distance ∝ ``k⁻²``, as ``q_k = x²/2k − x⁴/6k³ + …`` predicts. For
    ``α → 0`` at fixed s it approaches the min-ℓ1 interpolant; on sparse problems the distance
    falls like a power of α (the tests fit it), while [§2.3][theory-2-3] only states the
    logarithmic approach of the weights' ratios.

    Build from a model with ``ibflow.implicit_bias(model)``, from scale/shape with
    `from_scale_shape`, or for the tied-weight network ``w = u₊² − u₋²`` with `from_tied`.
    """

    k: Float[Array, " d"]
    w0: Float[Array, " d"]

    def __check_init__(self):
        if jnp.ndim(self.k) != 1 or jnp.shape(self.w0) != jnp.shape(self.k):
            raise ValueError("DiagonalNetRegularizer needs k and w0 of one shape (d,); got "
                             f"{jnp.shape(self.k)} and {jnp.shape(self.w0)}.")

    @classmethod
    def from_exp_coefficients(cls, p: Float[Array, " d"], m: Float[Array, " d"],
                              w0: Float[Array, " d"]) -> "DiagonalNetRegularizer":
        """The regularizer of gradient flow along ``w(ρ) = P e^ρ − N e^{−ρ}`` (any
        initialization, [THEORY AZ-A][theory-az-a]; `ibflow.implicit_bias` of a `DiagonalNet`
        calls this with its `exp_coefficients`): ``kᵢ = 4 sqrt(PᵢNᵢ)``, ``w₀ = P − N``.

        ``kᵢ = 0`` means coordinate i is sign-constrained (``w(ρ) = ±P e^{±ρ}``); its bias is
        then entropic, not of this family, and a ``ValueError`` is raised (eagerly) or a
        runtime error under ``jit``.
        """
        k = 4.0 * jnp.sqrt(p * m)
        k = _checks._check(k, lambda a: ~(a > 0),
                           "DiagonalNetRegularizer: k_i = 0 for some coordinate (u₊ = −v₊ and "
                           "u₋ = v₋, or u₊ = v₊ and u₋ = −v₋): that coordinate keeps its sign "
                           "and Theorem 1 does not apply to it.")
        return cls(k=k, w0=w0)

    @classmethod
    def from_scale_shape(cls, scale: Float[ArrayLike, "*d"], shape: Float[ArrayLike, "*d"] = 0.0,
                         *, dim: int | None = None) -> "DiagonalNetRegularizer":
        """Unbiased initialization with scale α and shape s, scalars or per coordinate
        ([THEORY AZ-7.1][theory-az-7-1]): ``k = 4α(1 + s²)/(1 − s²)``, ``w₀ = 0``. `dim` is needed
        only when both are scalars. Same arguments as `DiagonalNet.from_scale_shape`."""
        alpha, s = checked_scale_shape(scale, shape)
        k = 4.0 * alpha * (1 + s**2) / (1 - s**2)
        if k.ndim == 0:
            if dim is None:
                raise ValueError("pass dim=d when scale and shape are both scalars.")
            k = jnp.broadcast_to(k, (dim,))
        elif k.ndim != 1 or (dim is not None and k.shape != (dim,)):
            raise ValueError("scale/shape must be scalars or vectors of length dim; got shape "
                             f"{k.shape}.")
        return cls(k=k, w0=jnp.zeros_like(k))

    @classmethod
    def from_tied(cls, u_plus: Float[ArrayLike, " d"], u_minus: Float[ArrayLike, " d"]
                  ) -> "DiagonalNetRegularizer":
        """Tied weights ``w = u₊∘u₊ − u₋∘u₋`` (Woodworth et al. 2020; the case ``v± = u±`` of
        [THEORY §2.3][theory-2-3], which gradient flow preserves): ``k = 4|u₊u₋|``,
        ``w₀ = u₊² − u₋²``. With ``u₊ = u₋ = α^{1/2}`` this is Theorem 1 at shape s = 0,
        ``k = 4α``."""
        u_plus, u_minus = jnp.asarray(u_plus, dtype=float), jnp.asarray(u_minus, dtype=float)
        if u_plus.ndim != 1 or u_plus.shape != u_minus.shape:
            raise ValueError("from_tied needs u_plus and u_minus of one shape (d,); got "
                             f"{u_plus.shape} and {u_minus.shape}.")
        # P = u₊², N = u₋² (the exponential coefficients of the tied net, v± = u±).
        p, m = u_plus**2, u_minus**2
        return cls.from_exp_coefficients(p, m, p - m)

    # -- internal parametrization: c = k/2, φ = arcsinh(w₀/c) ------------------------------
    def _c_phi(self):
        c = self.k / 2.0
        return c, asinh_ratio(self.w0, c)

    def value(self, w):
        c, phi = self._c_phi()
        # q_k(x) = c/2 − ½·hypot(x, c) + (x/2)·arcsinh(x/c); the first two terms combined
        # without cancellation as −x²/(2(c + hypot(x, c))).
        h = jnp.hypot(w, c)
        q = -(w**2) / (2.0 * (c + h)) + 0.5 * w * asinh_ratio(w, c)
        return jnp.sum(q - 0.5 * w * phi)

    def grad(self, w):
        c, phi = self._c_phi()
        return 0.5 * (asinh_ratio(w, c) - phi)

    def grad_inverse(self, z):
        c, phi = self._c_phi()
        return scaled_sinh(jnp.log(c), 2.0 * z + phi)

    def conjugate(self, z):
        c, phi = self._c_phi()
        return 0.5 * jnp.sum(scaled_cosh_minus_one(jnp.log(c), 2.0 * z + phi))

    def interpolation_targets(self, y):
        return y

    def ntk_limit(self) -> WeightedL2Norm:
        """The kernel-regime limit ``k → ∞`` ([THEORY §2.3][theory-2-3] "Limits"): the quadratic
        expansion at ``w₀``, ``Σᵢ (wᵢ − w₀ᵢ)² / (2 sqrt(kᵢ² + 4w₀ᵢ²))``; for unbiased initialization
        the
        weighted ℓ2 norm ``Σᵢ wᵢ²/(2kᵢ)``."""
        return WeightedL2Norm(weights=1.0 / jnp.hypot(self.k, 2.0 * self.w0), center=self.w0)
