"""The theory shared by the single-hidden-neuron models (`FullyConnectedNet` of width 1,
`LeakyReLUNeuron`): the final sign of the second layer ([THEORY §2.4][theory-2-4], flip rule)."""

import jax.numpy as jnp

from .. import _checks


def final_sign(a0, w0, given):
    """``σ = sign(a(∞))``: ``sign(a₀)`` when it cannot change (δ ≥ 0), otherwise `given`, which
    is then required.

    δ is compared with a roundoff margin: δ = 0 built from a shape s = 0 comes out as
    ±1e-17 in floating point, and a balanced neuron cannot flip (it would have to pass through
    the saddle θ = 0)."""
    sign0 = jnp.sign(a0)
    sq = jnp.sum(w0**2)
    delta = a0**2 - sq
    margin = 64 * jnp.finfo(jnp.result_type(float)).eps * (a0**2 + sq)
    if given is None:
        return _checks._check(
            sign0, lambda s: delta < -margin,
            "implicit_bias: this single-neuron model has δ = a₀² − ‖w₀‖² < 0, so a can change "
            "sign during training and the regularizer depends on its final sign (docs/theory §2.4, "
            "flip rule). Integrate first and pass final_sign=sign(a(∞)), e.g. "
            "final_sign=jnp.sign(solution.model.a) (LeakyReLUNeuron) or "
            "jnp.sign(solution.model.second[0]) (FullyConnectedNet).")
    given = _checks.as_array(given, float)
    if given.ndim != 0:
        raise ValueError(f"final_sign must be a scalar ±1; got shape {given.shape}.")
    given = _checks._check(given, lambda s: ~((s == 1) | (s == -1)),
                           "final_sign must be +1 or -1.")
    return _checks._check(
        given, lambda s: (delta > margin) & (s != sign0),
        "implicit_bias: final_sign differs from sign(a₀) but δ > 0, so a cannot change sign "
        "(a² ≥ δ > 0, docs/theory §2.4): the final sign given is impossible.")
