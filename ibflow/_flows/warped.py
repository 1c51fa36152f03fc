"""Time-warped flows ([THEORY §2.2][theory-2-2] [AZ-WARP][theory-az-warp])."""

from collections.abc import Callable

import jax.numpy as jnp

from .base import AbstractFlow


class WarpedFlow(AbstractFlow):
    """The velocity of ``flow`` multiplied by a positive scalar ``g(model, loss)``.

    With the clock ``τ(t) = ∫₀ᵗ g ds`` the warped flow is the inner flow in time τ, so it visits
    the same path and reaches the same limit, at a different speed ([THEORY §2.2][theory-2-2]
    [AZ-WARP][theory-az-warp]).

    **Arguments:**
    - `flow`: the inner flow (`GradientFlow()`, a `MirrorFlow`, or another warp).
    - `g`: ``g(model, loss) -> scalar > 0``: `model` is the current model, `loss` the current loss
      value (a scalar array). Examples: ``lambda m, L: jnp.abs(m.second[0])`` (the single-neuron
      warp ``g = |a|`` of [THEORY §2.4][theory-2-4]), ``lambda m, L: 1 / L`` (a log-time clock, e.g.
      for classification). To sweep parameters of g without recompiling, pass an ``eqx.Module`` with
      array fields and a
      ``__call__(model, loss)``.

    Where ``g ≤ 0`` or is not finite the velocity is set to NaN, so ``integrate`` stops with
    ``Status.nonfinite`` instead of silently running the flow backwards.
    """

    flow: AbstractFlow
    g: Callable

    time_warped = True

    def __init__(self, flow: AbstractFlow, g: Callable):
        if not isinstance(flow, AbstractFlow):
            raise ValueError(f"WarpedFlow(flow, g): flow must be an ibflow flow; got "
                             f"{type(flow).__name__}.")
        if not callable(g):
            raise ValueError("WarpedFlow(flow, g): g must be callable as g(model, loss).")
        self.flow = flow
        self.g = g

    def warp(self, model, loss):
        """``g(model, loss)`` as a float scalar, NaN where it is not positive and finite."""
        value = jnp.asarray(self.g(model, loss), dtype=float)
        if value.ndim != 0:
            raise ValueError(f"WarpedFlow: g must return a scalar; got shape {value.shape}.")
        return jnp.where((value > 0) & jnp.isfinite(value), value, jnp.nan)

    def preconditioner(self, model, initial):
        return self.flow.preconditioner(model, initial)

    def speed(self, model, initial, grad, loss):
        return self.warp(model, loss) * self.flow.speed(model, initial, grad, loss)
