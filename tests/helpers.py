"""Shared test helpers: random problems and every foundation model, for parametrized tests."""

import equinox as eqx
import jax
import jax.numpy as jnp

import ibflow


def random_problem(key, n=10, d=40):
    kx, ky = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    y = jax.random.normal(ky, (n,))
    return X, y


def relative(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def foundation_models(key, d):
    """One instance of every foundation model (unbiased and biased where it applies)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    u = 0.3 * jax.random.normal(k4, (4, d))
    return {
        "diagonal-unbiased": ibflow.DiagonalNet.from_scale_shape(0.05, 0.4, dim=d),
        "diagonal-biased": ibflow.DiagonalNet(*u),
        "fc-width1": ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.2, dim=d, key=k1),
        "fc-width3": ibflow.FullyConnectedNet.from_scale_shape(0.3, 0.2, dim=d, width=3, key=k2),
        "leaky": ibflow.LeakyReLUNeuron.from_scale_shape(0.5, 0.3, dim=d, slope=0.5, key=k3),
    }


class PlainLinear(eqx.Module):
    """A researcher's own model: a plain Equinox module (no ibflow base class, no invariants),
    ``f(x) = ⟨w, x⟩ + c``."""

    w: jax.Array
    c: jax.Array

    def __call__(self, x):
        return jnp.dot(self.w, x) + self.c


class _Slow(eqx.Module):
    """A warp ``g = 1 / (1 + L)`` as a module (sweepable)."""

    def __call__(self, model, loss):
        return 1.0 / (1.0 + loss)


def _realizable(model, X, key, scale=0.3):
    """Targets near the model's own outputs, so a short flow interpolates without any
    pre-activation crossing a kink (the jit/vmap/grad checks below want smooth problems)."""
    out = jax.vmap(model)(X)
    return out + scale * (1 + jnp.abs(out)) * jax.random.normal(key, out.shape)


def every_model(key, n=3, d=5):
    """Every model ibflow ships, plus a plain Equinox module, each with a small problem:
    name → (model, X, y, loss, target_loss)."""
    ks = jax.random.split(key, 16)
    X = jax.random.normal(ks[0], (n, d))
    X1 = jnp.linspace(-1.0, 1.0, n)[:, None]
    square, logistic = ibflow.SquareLoss(), ibflow.LogisticLoss()
    models = {
        "diagonal": (ibflow.DiagonalNet.from_scale_shape(0.3, 0.4, dim=d), X),
        "fully-connected": (ibflow.FullyConnectedNet.from_scale_shape(
            0.5, 0.2, dim=d, width=2, key=ks[1]), X),
        "leaky-neuron": (ibflow.LeakyReLUNeuron.from_scale_shape(
            0.5, 0.3, dim=d, slope=0.5, key=ks[2]), X),
        "linear": (ibflow.LinearModel(0.1 * jax.random.normal(ks[3], (d,))), X),
        "shallow-relu": (ibflow.ShallowNet.init(6, output_std=1.0, key=ks[4]), X1),
        "two-layer-relu": (ibflow.TwoLayerNet.from_scale_shape(
            0.5, 0.3, dim=d, width=6, activation=ibflow.ReLU(), bias=True, key=ks[5]), X),
        "two-layer-tanh": (ibflow.TwoLayerNet.from_scale_shape(
            0.5, 0.3, dim=d, width=3, activation=ibflow.Tanh(), key=ks[6]), X),
        "plain-module": (PlainLinear(0.1 * jax.random.normal(ks[7], (d,)), jnp.array(0.2)), X),
    }
    # Kinked models get targets 1e-3 (relative) from their own outputs: the flow then moves the
    # pre-activations by ~1e-3, far less than their distance to a kink.
    kinked = {"leaky-neuron", "shallow-relu", "two-layer-relu"}
    out = {name: (m, data, _realizable(m, data, ks[8 + i], 1e-3 if name in kinked else 0.3),
                  square, None)
           for i, (name, (m, data)) in enumerate(models.items())}
    # The classifier's hidden pre-activations move by O(1) on the way to a low loss, so they
    # would cross kinks: the transform checks use slope γ = 1 (smooth); kinks: tests/test_kinks.py.
    classifier = ibflow.TwoLayerClassifier.init(dim=d, width=4, init_std=0.5, slope=1.0,
                                                key=ks[15])
    labels = jnp.where(X @ jnp.ones(d) >= 0, 1.0, -1.0)  # linearly separable
    out["classifier"] = (classifier, X, labels, logistic, 0.2)
    # A depth-3 tanh MLP with biases (keys of its own: the list above uses all 16).
    km, ky = jax.random.split(jax.random.fold_in(key, 16))
    mlp = ibflow.MLP.from_scale_shape(0.5, 0.2, dim=d, widths=(3, 3), activation=ibflow.Tanh(),
                                      bias=True, key=km)
    out["mlp-tanh-depth3"] = (mlp, X, _realizable(mlp, X, ky, 0.3), square, None)
    # A depth-3 ReLU MLP (kinks coupled across layers), targets near its outputs as above.
    km, ky = jax.random.split(jax.random.fold_in(key, 17))
    mlp = ibflow.MLP.from_scale_shape(0.5, 0.2, dim=d, widths=(3, 3), activation=ibflow.ReLU(),
                                      bias=True, key=km)
    out["mlp-relu-depth3"] = (mlp, X, _realizable(mlp, X, ky, 1e-3), square, None)
    return out


def every_flow():
    """Every kind of flow ibflow ships: name → flow. Mirror flows appear with a built-in
    potential and with a user potential (`FunctionPotential`) under width scaling; the other
    built-in potentials differ only in φ'' and are checked against their closed forms in
    tests/test_mirror.py (its ``POTENTIALS``)."""
    return {
        "gradient": ibflow.GradientFlow(),
        "mirror": ibflow.MirrorFlow(ibflow.CubicPotential()),
        "mirror-function-scaled": ibflow.MirrorFlow(
            ibflow.FunctionPotential(lambda x: x**2 / 2 + x**4 / 12),
            scaling=ibflow.WidthScaled(3)),
        "warped": ibflow.WarpedFlow(ibflow.GradientFlow(), _Slow()),
        "loss-clock": ibflow.LossClock(ibflow.GradientFlow()),
    }

