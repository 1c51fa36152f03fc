"""``implicit_bias``: the exact implicit regularizer of a model at its initialization, or a
clear refusal (THEORY §2.3–§2.6)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._models.base import AbstractModel
from .._models.diagonal import DiagonalNet
from .._models.fully_connected import FullyConnectedNet
from .._models.leaky_neuron import LeakyReLUNeuron
from .regularizers.base import AbstractRegularizer
from .regularizers.diagonal import DiagonalNetRegularizer
from .regularizers.leaky_neuron import LeakyNeuronRegularizer
from .regularizers.single_neuron import SingleNeuronRegularizer


class NoExactRegularizer(ValueError):
    """No exact implicit regularizer is known for this model (THEORY §2.6): ibflow refuses to
    return an approximation in its place."""


def _final_sign(a0, w0, final_sign):
    """``σ = sign(a(∞))``: ``sign(a₀)`` when it cannot change (δ ≥ 0), otherwise required.

    δ is compared with a roundoff margin: δ = 0 built from a shape s = 0 comes out as
    ±1e-17 in floating point, and a balanced neuron cannot flip (it would have to pass through
    the saddle θ = 0)."""
    sign0 = jnp.sign(a0)
    sq = jnp.sum(w0**2)
    delta = a0**2 - sq
    margin = 64 * jnp.finfo(jnp.result_type(float)).eps * (a0**2 + sq)
    if final_sign is None:
        return _checks._check(
            sign0, lambda s: delta < -margin,
            "implicit_bias: this single-neuron model has δ = a₀² − ‖w₀‖² < 0, so a can change "
            "sign during training and the regularizer depends on its final sign (THEORY §2.4, "
            "flip rule). Integrate first and pass final_sign=sign(a(∞)), e.g. "
            "final_sign=jnp.sign(solution.model.a) (LeakyReLUNeuron) or "
            "jnp.sign(solution.model.second[0]) (FullyConnectedNet).")
    final_sign = _checks.as_array(final_sign, float)
    if final_sign.ndim != 0:
        raise ValueError(f"final_sign must be a scalar ±1; got shape {final_sign.shape}.")
    final_sign = _checks._check(final_sign, lambda s: ~((s == 1) | (s == -1)),
                                "final_sign must be +1 or -1.")
    return _checks._check(
        final_sign, lambda s: (delta > margin) & (s != sign0),
        "implicit_bias: final_sign differs from sign(a₀) but δ > 0, so a cannot change sign "
        "(a² ≥ δ > 0, THEORY §2.4): the final sign given is impossible.")


def implicit_bias(model: AbstractModel, *, final_sign: Float[ArrayLike, ""] | None = None
                  ) -> AbstractRegularizer:
    """The exact implicit regularizer ``Q`` of gradient flow on the square loss started at
    `model`: if the flow converges to an interpolator, its predictor is
    ``minimize_regularizer(Q, X, y).w``.

    - `DiagonalNet` (any initialization): Theorem 1 / Appendix A, `DiagonalNetRegularizer`
      (THEORY [AZ-T1], [AZ-A]).
    - `FullyConnectedNet` of width 1: Theorem 2 / Prop. 1, `SingleNeuronRegularizer` (THEORY
      [AZ-FC-Q], [AZ-P1]).
    - `LeakyReLUNeuron`: Theorem 4, `LeakyNeuronRegularizer` (THEORY [AZ-T4]), whose
      interpolation set is affine.

    **Arguments:**
    - `model`: the initialization.
    - `final_sign`: single-neuron models only, the sign ±1 of the second layer ``a`` at the
      end of training. With δ = a₀² − ‖w₀‖² ≥ 0 it must be ``sign(a₀)`` and may be omitted;
      with δ < 0 ``a`` can flip and the regularizer changes (THEORY §2.4 flip rule), so it is
      required: integrate first, then pass e.g. ``jnp.sign(solution.model.a)``. Traced
      values are checked at run time (``eqx.error_if``).

    **Raises:** `NoExactRegularizer` (a ``ValueError``) for fully connected networks of width
    > 1 (each neuron has its own time warp ``|aᵢ(t)|``, so ``Σᵢ Qᵢ`` is only an approximation,
    THEORY §2.6) and for any other model; ``ValueError`` for a missing or impossible
    `final_sign`.

    The statement is about gradient flow on the square loss (any positive multiple of it,
    THEORY §1); the flow and loss used later are not known here and not checked.
    """
    if not isinstance(model, AbstractModel):
        raise ValueError(f"model must be an ibflow model (e.g. DiagonalNet); got "
                         f"{type(model).__name__}.")
    for leaf in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)):
        if not _checks.is_traced(leaf):
            _checks.finite(leaf, f"model ({type(model).__name__}) parameters")
    if final_sign is not None and not isinstance(model, (FullyConnectedNet, LeakyReLUNeuron)):
        raise ValueError("final_sign applies only to single-neuron models.")
    if isinstance(model, DiagonalNet):
        return DiagonalNetRegularizer.from_model(model)
    if isinstance(model, FullyConnectedNet):
        width = model.first.shape[0]
        if width != 1:
            raise NoExactRegularizer(
                f"no exact implicit regularizer is known for a fully connected network of width "
                f"{width} > 1: each neuron's bias is warped by its own |a_i(t)|, so the sum of "
                "per-neuron regularizers is only an approximation (THEORY §2.6; measured "
                "relative errors 1e-5 to 5e-2). Use width 1, or compare against the flow itself.")
        a0, w0 = model.second[0], model.first[0]
        delta = a0**2 - jnp.sum(w0**2)
        sign = _final_sign(a0, w0, final_sign)
        return SingleNeuronRegularizer(delta=delta, anchor=sign * w0)
    if isinstance(model, LeakyReLUNeuron):
        delta = model.a**2 - jnp.sum(model.w**2)
        sign = _final_sign(model.a, model.w, final_sign)
        return LeakyNeuronRegularizer(delta=delta, anchor=sign * model.w,
                                      slope=jnp.asarray(model.slope, dtype=float), sign=sign)
    raise NoExactRegularizer(
        f"no exact implicit regularizer is implemented for {type(model).__name__} (THEORY §2.6: "
        "exact results exist for the diagonal network, the single linear neuron and the single "
        "leaky-ReLU neuron).")
