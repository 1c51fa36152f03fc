"""Stiffness detection in the explicit phase (``ibflow._tail.stiffness``): a stability-limited
explicit phase hands over to the implicit tail early, and the limit does not change."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ibflow
from ibflow._tail.stiffness import STIFF_WINDOW, StiffnessWatch


class _Linear(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return jnp.dot(self.w, x)


def test_watch_counts_steps_per_decade_below_the_ceiling():
    """The decade mark moves with every tenfold loss decrease and while the loss is above the
    ceiling; `STIFF_WINDOW` attempted steps past the mark (below the ceiling) are stiff."""
    watch = StiffnessWatch(loss=lambda y: y, ceiling=jnp.asarray(1e-2))
    mark_loss, mark_steps = jnp.inf, 0
    stiff_at = None
    # 500 steps above the ceiling (no count), then 1e-2 → 1e-3 in 200 steps, then a crawl.
    losses = np.concatenate([np.full(500, 0.5), np.logspace(-2, -3, 200),
                             np.logspace(-3, -3.9, 2000)])
    for step, loss in enumerate(losses, 1):
        mark_loss, mark_steps, stiff = watch.update(jnp.asarray(step), jnp.asarray(True),
                                                    jnp.asarray(loss), mark_loss, mark_steps)
        if bool(stiff):
            stiff_at = step
            break
    # The last decade mark is the step where 1e-3 was reached (step 700).
    assert stiff_at == 700 + STIFF_WINDOW
    # Rejected steps count but do not move the mark, and a rejected step never flags.
    _, same_steps, stiff = watch.update(jnp.asarray(10_000), jnp.asarray(False),
                                        jnp.asarray(1e-9), jnp.asarray(1e-3), jnp.asarray(0))
    assert int(same_steps) == 0 and not bool(stiff)
    # Above the ceiling nothing is stiff, however long.
    _, _, stiff = watch.update(jnp.asarray(10_000), jnp.asarray(True), jnp.asarray(0.5),
                               jnp.asarray(0.5), jnp.asarray(0))
    assert not bool(stiff)


def test_stiff_explicit_phase_hands_over_early_to_the_same_limit():
    """Gradient flow of least squares with a 1e4-conditioned tangent kernel: Tsit5 is held at
    its stability limit (~0.35·κ steps per decade of loss). With the default switch the tail
    takes over once a decade costs `STIFF_WINDOW` steps; with an explicit ``stiff_switch=1e-8``
    the explicit phase crawls to that level. Both reach the closed form, the minimum-norm
    interpolant from w₀ (``w₀ + X⁺(y − X w₀)``), to 1e-10; the watched run in fewer than half
    the steps."""
    rng = np.random.default_rng(0)
    n, d = 6, 10
    U, _ = np.linalg.qr(rng.normal(size=(n, n)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = U @ np.diag(np.logspace(0, -2, n) * np.sqrt(n)) @ V[:, :n].T
    y = rng.normal(size=n)
    w0 = 0.1 * rng.normal(size=d)
    reference = w0 + np.linalg.pinv(X) @ (y - X @ w0)
    steps = {}
    for name, options in (("watched", {}), ("level", dict(stiff_switch=1e-8))):
        sol = ibflow.integrate(_Linear(jnp.asarray(w0)), X, y, throw=False, **options)
        assert sol.status == ibflow.Status.converged, name
        error = np.linalg.norm(np.asarray(sol.model.w) - reference) / np.linalg.norm(reference)
        assert error <= 1e-10, (name, error)
        steps[name] = int(sol.steps)
    assert steps["watched"] < steps["level"] / 2, steps
