"""`ibflow.certify`: its numbers against independent references — numpy's ``eigvalsh`` of a
dense ``jax.hessian`` (and of closed-form Hessians), ``jax.grad`` — and the matrix-free Lanczos
path against the dense one."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import ibflow
from ibflow._certify import lanczos_extremes


def test_lanczos_finds_the_extreme_eigenvalues(getkey):
    A = jax.random.normal(getkey(), (200, 200))
    A = A + A.T
    v0 = jax.random.normal(getkey(), (200,))
    reference = np.linalg.eigvalsh(np.asarray(A))
    low, high = lanczos_extremes(lambda v: A @ v, v0, 100)
    np.testing.assert_allclose([low, high], reference[[0, -1]], rtol=1e-10)
    # An operator with 4 distinct eigenvalues: an invariant Krylov subspace after 4 steps, the
    # later steps are padding and must not perturb the answer.
    D = jnp.diag(jnp.concatenate([jnp.array([-4.0, 1.0, 2.0, 3.0]), jnp.zeros(6)]))
    np.testing.assert_allclose(lanczos_extremes(lambda v: D @ v, v0[:10], 10), (-4.0, 3.0),
                               rtol=1e-12)


def _problem(getkey, n=6, d=3):
    X = jax.random.normal(getkey(), (n, d))
    y = jax.random.normal(getkey(), (n,))
    model = ibflow.MLP.from_scale_shape(1.0, 0.2, dim=d, widths=(4, 3),
                                        activation=ibflow.Softplus(), bias=True, key=getkey())
    return model, X, y


def _dense_reference(model, X, y):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    theta, unravel = ravel_pytree(params)

    def loss(t):
        return 0.5 * jnp.mean((jax.vmap(eqx.combine(unravel(t), static))(X) - y) ** 2)

    return loss(theta), jax.grad(loss)(theta), np.linalg.eigvalsh(
        np.asarray(jax.hessian(loss)(theta)))


def test_dense_and_lanczos_certificates_match_the_dense_hessian(getkey):
    model, X, y = _problem(getkey)
    value, grad, eigenvalues = _dense_reference(model, X, y)
    dense = ibflow.certify(model, X, y)
    lanczos = ibflow.certify(model, X, y, dense_max=1, lanczos_steps=80)
    for cert in (dense, lanczos):
        np.testing.assert_allclose(cert.loss, value, rtol=1e-13)
        np.testing.assert_allclose(cert.gradient_norm, np.linalg.norm(grad), rtol=1e-12)
        np.testing.assert_allclose([cert.hessian_min, cert.hessian_max],
                                   eigenvalues[[0, -1]], rtol=1e-8, atol=1e-12)
        assert cert.verdict == "not stationary"  # a random initialization


def test_least_squares_minimum_with_flat_directions():
    """A linear model at the minimum-norm least-squares solution of an underdetermined problem:
    H = XᵀX/n (closed form) is singular, its smallest eigenvalue 0 — a degenerate minimum,
    not a saddle."""
    X = jax.random.normal(jax.random.key(1), (3, 6))
    y = jax.random.normal(jax.random.key(2), (3,))
    w = np.linalg.pinv(np.asarray(X)) @ np.asarray(y)
    cert = ibflow.certify(ibflow.LinearModel(jnp.asarray(w)), X, y)
    H = np.asarray(X).T @ np.asarray(X) / 3
    eigenvalues = np.linalg.eigvalsh(H)
    np.testing.assert_allclose(cert.hessian_max, eigenvalues[-1], rtol=1e-12)
    assert abs(float(cert.hessian_min)) < 1e-14 * eigenvalues[-1]
    assert cert.verdict == "minimum" and bool(cert.stationary)
    assert float(cert.loss) < 1e-28


def test_a_quadratic_saddle():
    """f(x) = u·v·x on the data x = 1, y = 1: at u = v = 0 the gradient is 0 and the Hessian
    [[0, −1], [−1, 0]] has eigenvalues ±1: a saddle."""

    class Product(eqx.Module):
        u: jax.Array
        v: jax.Array

        def __call__(self, x):
            return self.u * self.v * x[0]

    cert = ibflow.certify(Product(jnp.array(0.0), jnp.array(0.0)), jnp.ones((1, 1)),
                          jnp.ones(1))
    np.testing.assert_allclose([cert.hessian_min, cert.hessian_max], [-1.0, 1.0], rtol=1e-14)
    assert cert.verdict == "saddle"
    assert float(cert.gradient_norm) == 0.0
    # The certificate's own status (the shared result base): its numbers are finite.
    assert bool(cert.converged) and cert.summary().startswith("Certificate(converged")
    blown = ibflow.certify(Product(jnp.array(jnp.inf), jnp.array(0.0)), jnp.ones((1, 1)),
                           jnp.ones(1))
    assert blown.status == ibflow.Status.nonfinite


def test_certify_under_vmap_matches_a_loop(getkey):
    model, X, y = _problem(getkey)
    models = jax.tree_util.tree_map(lambda a: jnp.stack([a, 1.1 * a]), model)
    batched = eqx.filter_vmap(lambda m: ibflow.certify(m, X, y))(models)
    for i, k in enumerate((1.0, 1.1)):
        single = ibflow.certify(jax.tree_util.tree_map(lambda a, k=k: k * a, model), X, y)
        np.testing.assert_allclose(batched.hessian_min[i], single.hessian_min, rtol=1e-10)
        np.testing.assert_allclose(batched.gradient_norm[i], single.gradient_norm, rtol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dense_max=0), "dense_max"),
    (dict(lanczos_steps=1.5), "lanczos_steps"),
    (dict(loss="square"), "loss"),
])
def test_bad_options_are_refused_by_name(getkey, kwargs, match):
    model, X, y = _problem(getkey)
    with pytest.raises(ValueError, match=match):
        ibflow.certify(model, X, y, **kwargs)
