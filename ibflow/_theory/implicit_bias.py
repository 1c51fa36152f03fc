"""``implicit_bias``: the exact implicit regularizer of a model at its initialization, or a
clear refusal ([THEORY §2.3–§2.6][theory-2-3])."""

import equinox as eqx
import jax
from jaxtyping import ArrayLike, Float

from .. import _checks
from .._models.base import AbstractImplicitBiasModel, AbstractModel
from .regularizers.base import AbstractRegularizer
from .regularizers.base import NoExactRegularizer as NoExactRegularizer


def implicit_bias(model: AbstractModel, *, final_sign: Float[ArrayLike, ""] | None = None
                  ) -> AbstractRegularizer:
    """The exact implicit regularizer ``Q`` of gradient flow on the square loss started at
    `model`: if the flow converges to an interpolator, its predictor is
    ``minimize_regularizer(Q, X, y).w``. Asked of the model (`AbstractImplicitBiasModel`):

    - `DiagonalNet` (any initialization): Theorem 1 / Appendix A, `DiagonalNetRegularizer`
      ([THEORY AZ-T1][theory-az-t1], [AZ-A][theory-az-a]).
    - `FullyConnectedNet` of width 1: Theorem 2 / Prop. 1, `SingleNeuronRegularizer`
      ([THEORY AZ-FC-Q][theory-az-fc-q], [AZ-P1][theory-az-p1]).
    - `LeakyReLUNeuron`: Theorem 4, `LeakyNeuronRegularizer` ([THEORY AZ-T4][theory-az-t4]), whose
      interpolation set is affine.

    **Arguments:**
    - `model`: the initialization.
    - `final_sign`: single-neuron models only, the sign ±1 of the second layer ``a`` at the
      end of training. With δ = a₀² − ‖w₀‖² ≥ 0 it must be ``sign(a₀)`` and may be omitted;
      with δ < 0 ``a`` can flip and the regularizer changes ([THEORY §2.4][theory-2-4] flip rule),
      so it is
      required: integrate first, then pass e.g. ``jnp.sign(solution.model.a)``. Traced
      values are checked at run time (``eqx.error_if``).

    **Raises:** `NoExactRegularizer` (a ``ValueError``) for fully connected networks of width
    > 1 (each neuron has its own time warp ``|aᵢ(t)|``, so ``Σᵢ Qᵢ`` is only an approximation,
    [THEORY §2.6][theory-2-6]) and for any other model; ``ValueError`` for a missing or impossible
    `final_sign`.

    The statement is about gradient flow on the square loss (any positive multiple of it,
    [THEORY §1][theory-1]); the flow and loss used later are not known here and not checked.
    """
    if not isinstance(model, AbstractModel):
        raise ValueError(f"model must be an ibflow model (e.g. DiagonalNet); got "
                         f"{type(model).__name__}.")
    for leaf in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)):
        if not _checks.is_traced(leaf):
            _checks.finite(leaf, f"model ({type(model).__name__}) parameters")
    if not isinstance(model, AbstractImplicitBiasModel):
        if final_sign is not None:
            raise ValueError("final_sign applies only to single-neuron models.")
        raise NoExactRegularizer(
            f"no exact implicit regularizer is implemented for {type(model).__name__} "
            "(docs/theory §2.6: exact results exist for the diagonal network, the single linear "
            "neuron and the single leaky-ReLU neuron; a model of your own offers its regularizer "
            "by implementing ibflow.AbstractImplicitBiasModel).")
    return model.implicit_bias(final_sign=final_sign)
