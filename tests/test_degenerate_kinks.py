"""Degenerate but valid kinked problems (issue "Results that cannot be silently wrong", item 8):
a leaky-ReLU neuron whose data has duplicated rows or rows x = 0, with realizable targets.
Sliding pairs of duplicated examples give identical rows and columns of the Filippov multiplier
system, an x = 0 pair a zero row and column (its pre-activation is 0 for all time); the system
is singular but consistent (THEORY §8.2–8.3), and the flow must still reach its limit. The
limits are checked against the same problem without the degenerate rows, integrated by ibflow,
and against full-batch GD with step halving and Richardson extrapolation (THEORY §8.2's
independent reference), which never solves a multiplier system."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow
from ibflow._kinks.equivalent_control import equivalent_control, linear_response

GAMMA = 0.3


def _relative(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def _sliding_problem():
    """THEORY §8.2's setting (γ = 0.3, n = 8, d = 30, α = 1, s = 0, mixed-sign realizable
    targets ``y = σ_a(⟨w̃*, x⟩)``), the seed of benchmarks/kinks.py that slides twice; its
    sliding pairs belong to examples 2 and 4."""
    kx, km, kt = jax.random.split(jax.random.key(2), 3)
    X = jax.random.normal(kx, (8, 30))
    m = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, 0.0, dim=30, slope=GAMMA, key=km)
    sign = jnp.sign(m.a)
    z = X @ jax.random.normal(kt, (30,)) / jnp.sqrt(30.0)
    return m, X, sign * jnp.where(sign * z >= 0, sign * z, GAMMA * sign * z)


@eqx.filter_jit
def _gd(model, X, y, lr, target):
    """Full-batch GD on ``L = ½ mean((f − y)²)`` until ``L ≤ target`` (at most 10⁷ steps)."""
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(p, static))(X) - y) ** 2)

    def body(carry):
        p, it, _ = carry
        value, g = jax.value_and_grad(loss)(p)
        return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), it + 1, value

    p, it, value = jax.lax.while_loop(
        lambda c: (c[2] > target) & (c[1] < 10_000_000), body, (params, 0, loss(params)))
    return eqx.combine(p, static).predictor(), value


def _gd_richardson(model, X, y):
    """GD's limit at steps η/8, η/16, η/32 (η a quarter of the stability bound on the path),
    extrapolated twice: ``R(η) = 2w(η/2) − w(η)`` removes the O(η) error, ``(4R(η/2) − R(η))/3``
    the O(η²) one. Each run goes to a loss of 1e-24·mean(y²)/2, GD's own limit to ~1e-12."""
    lr = 0.25 / (2 * float(model.a**2 + jnp.sum(model.w**2))
                 * float(jnp.linalg.norm(X, 2)) ** 2 / X.shape[0])
    target = 1e-24 * 0.5 * float(jnp.mean(y**2))
    runs = []
    for k in (3, 4, 5):
        w, value = _gd(model, X, y, lr / 2**k, target)
        assert float(value) <= target
        runs.append(w)
    once = [2 * fine - coarse for coarse, fine in zip(runs, runs[1:])]
    return (4 * once[1] - once[0]) / 3


def _check_limit(model, X, y, plain):
    """The degenerate problem ends converged, at the limit of the problem without the
    degenerate rows (`plain`), in about as many steps, and at GD+R's limit."""
    sol = ibflow.integrate(model, X, y, throw=False)
    assert sol.status == ibflow.Status.converged, ibflow.Status[sol.status]
    assert float(sol.loss) <= float(sol.target_loss)
    assert _relative(sol.predictor, plain.predictor) <= 1e-10
    assert int(sol.steps) <= 1.5 * int(plain.steps), (int(sol.steps), int(plain.steps))
    assert _relative(sol.predictor, _gd_richardson(model, X, y)) <= 1e-7
    return sol


def test_duplicated_sliding_examples_reach_the_limit_without_the_copies():
    """Examples 2 and 4 (whose pairs slide) appear twice: the copies reach their kink together
    and slide together, with identical multiplier rows; each one duplicated alone ended
    `degenerate_sliding` after 1–2 switches. The copies weigh examples 2 and 4 double, which
    changes the path but not the limit (Theorem 4's argmin Q on the affine interpolation set,
    which the duplicates do not change; checked here too)."""
    m, X, y = _sliding_problem()
    plain = ibflow.integrate(m, X, y)
    assert int(plain.kinks.slides) >= 2  # else no copy would slide
    rows = jnp.array([2, 4])
    sol = _check_limit(m, jnp.vstack([X, X[rows]]), jnp.concatenate([y, y[rows]]), plain)
    assert int(sol.kinks.slides) >= 2
    Q = ibflow.implicit_bias(m, final_sign=jnp.sign(sol.model.a))
    assert _relative(sol.predictor, ibflow.minimize_regularizer(Q, X, y).w) <= 1e-10


def test_zero_examples_reach_the_limit_without_them():
    """Two examples x = 0 with their realizable targets y = σ(0) = 0: each adds a constant 0
    to the loss (the path is the plain one at 8/10 of its speed), and its pair sits on its kink
    forever with a zero row and column in the multiplier system. Before: `degenerate_sliding`
    at the first event that picked such a pair."""
    m, X, y = _sliding_problem()
    plain = ibflow.integrate(m, X, y)
    zeros = jnp.zeros((2, X.shape[1]))
    _check_limit(m, jnp.vstack([X, zeros]), jnp.concatenate([y, jnp.zeros(2)]), plain)


def test_singular_consistent_multiplier_system_gets_the_minimal_norm_slopes():
    """One neuron, ``ż(λ) = X (v₀ − Σₗ rₗ λₗ xₗ)`` (a gradient-flow direction) on four examples
    ``x₁, x₁, 0, x₂``; the first three slide. Closed form: the copies share the slope λ* with
    ``⟨x₁, v₀⟩ − 2r₁λ*‖x₁‖² − r₂·hi·⟨x₁, x₂⟩ = 0`` (the minimal-norm split of their sum), the
    x = 0 pair keeps the base slope (it moves nothing), the copies attract (stiffness < 0) and
    the x = 0 pair is neutral (stiffness 0). With only the x = 0 pair sliding, the one-row
    system keeps its base slope too."""
    x1, x2 = jnp.array([1.0, 0.5, -0.3]), jnp.array([0.2, -1.0, 0.7])
    X = jnp.stack([x1, x1, jnp.zeros(3), x2])
    r = jnp.array([0.8, 0.8, 0.0, -0.4])
    v0 = jnp.array([0.9, 0.1, 0.4])
    lo, hi = 0.3, 1.0

    def zdot(slopes):  # (4, 1) -> (4, 1)
        return (X @ (v0 - (r * slopes[:, 0]) @ X))[:, None]

    sliding = jnp.array([True, True, True, False])[:, None]
    base = jnp.where(sliding, 0.5 * (lo + hi), hi)
    for rows in (3, 4):
        slopes, ok, stiffness = equivalent_control(
            lambda index, mask: linear_response(zdot, base, index, mask), base, sliding, rows)
        star = (x1 @ v0 - r[3] * hi * (x1 @ x2)) / (2 * r[0] * (x1 @ x1))
        assert bool(ok)
        np.testing.assert_allclose(np.asarray(slopes[:, 0]), [star, star, 0.5 * (lo + hi), hi],
                                   rtol=1e-13)
        np.testing.assert_allclose(np.asarray(zdot(slopes)[:3, 0]), 0.0, atol=1e-14)
        assert float(stiffness[0, 0]) < 0 and float(stiffness[1, 0]) < 0
        assert float(stiffness[2, 0]) == 0.0

    alone = jnp.array([False, False, True, False])[:, None]
    base = jnp.where(alone, 0.5 * (lo + hi), hi)
    slopes, ok, stiffness = equivalent_control(
        lambda index, mask: linear_response(zdot, base, index, mask), base, alone, 1)
    assert bool(ok)
    np.testing.assert_array_equal(np.asarray(slopes), np.asarray(base))
    assert float(stiffness[2, 0]) == 0.0
