"""`ibflow.MLP` (any depth, biases, any activation) and `ibflow.data.teacher_student`: the
initialization's norms against their definition, the forward pass against numpy, the depth-3
tanh flow's limit against gradient descent extrapolated in the step (Richardson/Romberg,
THEORY §8.2), a ReLU MLP away from its kinks, and refused misuse."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import ibflow


def _numpy_forward(model, X, activation):
    h = np.asarray(X).T
    for layer, w in enumerate(model.weights):
        h = np.asarray(w) @ h
        if model.biases is not None:
            h = h + np.asarray(model.biases[layer])[:, None]
        if layer < model.depth - 1:
            h = activation(h)
    return h[0]


def test_forward_pass_matches_numpy(getkey):
    X = jax.random.normal(getkey(), (7, 4))
    for activation, ref in ((ibflow.Tanh(), np.tanh),
                            (ibflow.Softplus(), lambda z: np.log1p(np.exp(z))),
                            (ibflow.ReLU(), lambda z: np.maximum(z, 0.0))):
        model = ibflow.MLP.from_scale_shape(2.0, 0.3, dim=4, widths=(5, 3, 2),
                                            activation=activation, bias=True, key=getkey())
        model = eqx.tree_at(lambda m: m.biases, model, tuple(
            jax.random.normal(getkey(), b.shape) for b in model.biases))
        np.testing.assert_allclose(jax.vmap(model)(X), _numpy_forward(model, X, ref),
                                   rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", [0.0, 0.5, (-0.4, 0.7)])
def test_scale_shape_norms(getkey, shape):
    """Every hidden row of layer l has norm r_l, every output weight magnitude r_L, Π r_l = α,
    r_{l+1}/r_l = (1+s_l)/(1−s_l)."""
    widths = (4, 3)
    alpha = 0.37
    model = ibflow.MLP.from_scale_shape(alpha, shape, dim=5, widths=widths,
                                        activation=ibflow.Tanh(), key=getkey())
    norms = []
    for w in model.weights:
        rows = np.linalg.norm(np.asarray(w), axis=1) if w.shape[0] > 1 else np.abs(w[0])
        np.testing.assert_allclose(rows, rows[0], rtol=1e-13)
        norms.append(rows[0])
    np.testing.assert_allclose(np.prod(norms), alpha, rtol=1e-13)
    s = np.broadcast_to(np.asarray(shape, float), (len(widths),))
    np.testing.assert_allclose(np.array(norms[1:]) / np.array(norms[:-1]), (1 + s) / (1 - s),
                               rtol=1e-13)
    assert model.biases is None


def test_two_layer_norms_are_two_layer_nets(getkey):
    """Depth 2: |a| = sqrt(α(1+s)/(1−s)) and ‖w‖ = sqrt(α(1−s)/(1+s)), as TwoLayerNet."""
    alpha, s = 0.8, 0.6
    model = ibflow.MLP.from_scale_shape(alpha, s, dim=3, widths=(5,), activation=ibflow.Tanh(),
                                        key=getkey())
    np.testing.assert_allclose(np.abs(model.weights[1]), np.sqrt(alpha * (1 + s) / (1 - s)),
                               rtol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(model.weights[0], axis=1),
                               np.sqrt(alpha * (1 - s) / (1 + s)), rtol=1e-13)


def _flat(model):
    return ravel_pytree(eqx.filter(model, eqx.is_inexact_array))[0]


def test_depth3_tanh_limit_matches_extrapolated_gradient_descent():
    """GD's limit differs from the flow's by O(η) (a different point of the interpolating
    manifold). Richardson ``R(η) = 2θ(η/2) − θ(η)`` removes the first-order term and Romberg
    ``(4R(η/2) − R(η))/3`` the second (η = 0.02 … 0.0025): the errors of R must fall ~4× per
    halving, and the Romberg value must land within 1e-7 of the flow's limit while plain GD at
    the smallest step is ≥ 1e-5 away."""
    X = jax.random.normal(jax.random.key(1), (4, 3))
    y = jax.random.normal(jax.random.key(2), (4,))
    model = ibflow.MLP.from_scale_shape(1.0, 0.2, dim=3, widths=(3, 3),
                                        activation=ibflow.Tanh(), bias=True,
                                        key=jax.random.key(3))
    sol = ibflow.integrate(model, X, y)
    assert sol.status == ibflow.Status.converged
    limit = _flat(sol.model)

    def gd(eta, steps):
        res = ibflow.descend(model, X, y, optimizer=optax.sgd(eta), num_steps=steps)
        assert float(res.losses[-1]) < 1e-26
        return _flat(res.model)

    g1, g2, g4, g8 = (gd(eta, int(2000 / eta)) for eta in (0.02, 0.01, 0.005, 0.0025))
    r1, r2, r4 = 2 * g2 - g1, 2 * g4 - g2, 2 * g8 - g4
    e1, e2 = np.linalg.norm(r1 - limit), np.linalg.norm(r2 - limit)
    assert 3.0 < e1 / e2 < 5.0, (e1, e2)  # second order: the flow's limit is their limit
    assert np.linalg.norm(g8 - limit) > 1e-5
    np.testing.assert_allclose((4 * r4 - r2) / 3, limit, atol=1e-7)


def test_relu_mlp_away_from_its_kinks_is_the_smooth_flow(getkey):
    """Targets close to its own outputs keep every pre-activation away from 0: no event fires,
    and the default (the kink machinery, coupled across layers at depth 3) and
    ``ParameterSpace(kinks=False)`` (autodiff's one-sided slopes) integrate the same smooth
    field to the same interpolating limit (through kinks: tests/test_mlp_kinks.py)."""
    # The shapes and options of tests/test_mlp_kinks.py's problems: one compiled kinked program.
    X = jax.random.normal(getkey(), (6, 3))
    model = ibflow.MLP.from_scale_shape(1.0, dim=3, widths=(4, 4), activation=ibflow.ReLU(),
                                        bias=True, key=getkey())
    out = jax.vmap(model)(X)
    y = out + 1e-3 * jax.random.normal(getkey(), out.shape)
    sol = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace(kinks=False))
    default = ibflow.integrate(model, X, y, throw=False)
    assert sol.status == default.status == ibflow.Status.converged
    assert int(default.kinks.switches) == 0
    np.testing.assert_allclose(jax.vmap(sol.model)(X), y, atol=1e-10)
    difference = np.linalg.norm(_flat(default.model) - _flat(sol.model))
    assert difference <= 1e-10 * np.linalg.norm(_flat(sol.model)), difference


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale=-1.0), "scale"),
    (dict(shape=1.0), "shape"),
    (dict(shape=(0.1, 0.2, 0.3)), "shape"),
    (dict(widths=(0,)), "widths"),
    (dict(widths=3), "widths"),
    (dict(dim=0), "dim"),
])
def test_bad_initialization_is_refused_by_name(kwargs, match):
    options = dict(scale=1.0, shape=0.0, dim=3, widths=(2, 2), activation=ibflow.Tanh(),
                   key=jax.random.key(0))
    options.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ibflow.MLP.from_scale_shape(options.pop("scale"), options.pop("shape"), **options)


def test_bad_layers_are_refused():
    with pytest.raises(ValueError, match="columns"):
        ibflow.MLP(weights=(jnp.ones((3, 2)), jnp.ones((1, 4))), biases=None,
                   activation=ibflow.Tanh())
    with pytest.raises(ValueError, match="one row"):
        ibflow.MLP(weights=(jnp.ones((3, 2)), jnp.ones((2, 3))), biases=None,
                   activation=ibflow.Tanh())
    with pytest.raises(ValueError, match="biases"):
        ibflow.MLP(weights=(jnp.ones((3, 2)), jnp.ones((1, 3))), biases=(jnp.ones(3),),
                   activation=ibflow.Tanh())
    with pytest.raises(ValueError, match="activation"):
        ibflow.MLP(weights=(jnp.ones((1, 2)),), biases=None, activation=jnp.tanh)


def test_teacher_student_labels_are_the_teachers_outputs(getkey):
    teacher = ibflow.MLP.from_scale_shape(1.5, dim=3, widths=(4, 2), activation=ibflow.Tanh(),
                                          bias=True, key=getkey())
    data = ibflow.data.teacher_student(getkey(), n=20, d=3, teacher=teacher, n_test=30)
    assert data.X.shape == (20, 3) and data.X_test.shape == (30, 3)
    np.testing.assert_allclose(data.y, _numpy_forward(teacher, data.X, np.tanh), rtol=1e-13)
    np.testing.assert_allclose(data.y_test, _numpy_forward(teacher, data.X_test, np.tanh),
                               rtol=1e-13)
    noisy = ibflow.data.teacher_student(jax.random.key(7), n=20_000, d=3, teacher=teacher,
                                        noise=0.5, n_test=1)
    residual = np.asarray(noisy.y) - _numpy_forward(teacher, noisy.X, np.tanh)
    np.testing.assert_allclose(np.std(residual), 0.5, rtol=0.03)  # 20 000 samples: ~0.5 %
    np.testing.assert_allclose(np.std(noisy.X), 1.0, rtol=0.02)
    default = ibflow.data.teacher_student(getkey(), n=5, d=2)
    np.testing.assert_allclose(default.y, jax.vmap(default.teacher)(default.X), rtol=1e-15)
    with pytest.raises(ValueError, match="teacher"):
        ibflow.data.teacher_student(getkey(), n=5, d=2, teacher=3.0)
    with pytest.raises(ValueError, match="noise"):
        ibflow.data.teacher_student(getkey(), n=5, d=2, noise=-1.0)
