"""A two-layer classifier's flow in span coordinates ([THEORY §4.0–4.1][theory-4-0]), smooth
(`ClassifierReducedDynamics`) and through its kinks (`ClassifierKinkedDynamics`,
[THEORY §8.2][theory-8-2]). Both live here, in `ibflow._kinks`, because the smooth one offers the
kinked one (`AbstractKinkReducible.through_kinks`) and the kinked one extends it: one module, no
import cycle.

**Reduction (exact).** ``∇_{wⱼ} L = Σᵢ Dⱼᵢ xᵢ`` with ``D = ∂L/∂P`` the derivative with respect to
the pre-activations ``Pⱼᵢ = ⟨wⱼ, xᵢ⟩ + bⱼ``. So under gradient flow (in any clock: a scalar speed
does not leave the span) ``W(c) = W(0) + C(c) X`` with ``C ∈ ℝ^{m×n}``, ``dC/dc = −speed·D``, and
``P = W(0)Xᵀ + C G + b1ᵀ`` with the Gram matrix ``G = XXᵀ``. The state is ``C`` (m·n numbers, not
m·d: 1 000 instead of 78 400 for the seed) plus ``a``/``b`` when trained, plus the real time
when the clock is warped. When n > d the span coordinates are no cheaper, and the state holds
``W − W(0)`` instead (same ODE).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._activations.relu import leaky_relu
from .._dynamics.base import AbstractDynamics, AbstractKinkReducible
from .._flows.base import AbstractFlow
from .._losses import AbstractLoss
from .kinked import AbstractKinkedDynamics


class ClassifierReducedDynamics(AbstractKinkReducible):
    """The reduced ODE above; state ``{"c", ["a"], ["b"], ["t"]}``. Offered by
    `TwoLayerClassifier.reduced_dynamics` for flows without a preconditioner (gradient flow and
    its time warps, e.g. `LossClock(GradientFlow())`)."""

    initial: eqx.Module  # a TwoLayerClassifier
    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    flow: AbstractFlow
    loss_fn: AbstractLoss
    gram: Float[Array, "n n"]
    pre0: Float[Array, "m n"]
    reduced: bool = eqx.field(static=True)

    def __init__(self, initial, X, y, flow, loss_fn):
        self.initial, self.X, self.y, self.flow, self.loss_fn = initial, X, y, flow, loss_fn
        self.reduced = X.shape[0] <= X.shape[1]
        self.gram = X @ X.T
        self.pre0 = initial.first @ X.T

    def initial_state(self):
        shape = self.pre0.shape if self.reduced else self.initial.first.shape
        state = {"c": jnp.zeros(shape, dtype=self.X.dtype)}
        if self.initial.train_second:
            state["a"] = self.initial.second
        if self.initial.bias is not None:
            state["b"] = self.initial.bias
        if self.flow.time_warped:
            state["t"] = jnp.zeros((), self.X.dtype)
        return state

    def _trained(self, state):
        return state["c"], state.get("a", jax.lax.stop_gradient(self.initial.second)), \
            state.get("b", None)

    def _pre(self, c, b):
        pre = self.pre0 + (c @ self.gram if self.reduced else c @ self.X.T)
        return pre if b is None else pre + b[:, None]

    def _loss_of_pre(self, pre, a, slopes=None):
        act = leaky_relu(pre, jax.lax.stop_gradient(self.initial.slope))
        if slopes is not None:
            # (n, m): the value stays σ(pre) and its derivative in pre is the slopes; its
            # derivative in the slopes is 0, so the equivalent control's ż is exactly affine in
            # them (``slopes·pre − sg(slopes·pre)`` had ``pre`` there, which is not 0 off the kink).
            act = jax.lax.stop_gradient(act) + slopes.T * (pre - jax.lax.stop_gradient(pre))
        return self.loss_fn(a @ act, self.y)

    def data_loss(self, model):
        return self.loss_fn(jax.vmap(model)(self.X), self.y)

    def loss(self, state):
        c, a, b = self._trained(state)
        return self._loss_of_pre(self._pre(c, b), a)

    def model(self, state):
        c, a, b = self._trained(state)
        shift = c @ self.X if self.reduced else c
        return type(self.initial)(first=self.initial.first + shift, second=a, bias=b,
                                  slope=self.initial.slope,
                                  train_second=self.initial.train_second)

    def time(self, c, state):
        return state["t"] if self.flow.time_warped else c

    def _field(self, state, slopes, speed=None):
        """The field, or with ``speed=1.0`` its direction (the real time's rate then 0);
        `slopes` (n, m) replace the activation's derivative (None: its own)."""
        c, a, b = self._trained(state)
        value, (d_pre, d_a) = jax.value_and_grad(self._loss_of_pre, argnums=(0, 1))(
            self._pre(c, b), a, slopes)
        grad_first = d_pre @ self.X if speed is None or not self.reduced else None
        if speed is None:  # the flow's speed needs the gradient in parameter space
            model = self.model(state)
            # ∇_W L = D X, ∇_b L = D 1
            grad = jax.tree_util.tree_map(jnp.zeros_like, eqx.filter(model, eqx.is_inexact_array))
            grad = eqx.tree_at(lambda g: g.first, grad, grad_first)
            if "a" in state:
                grad = eqx.tree_at(lambda g: g.second, grad, d_a)
            if "b" in state:
                grad = eqx.tree_at(lambda g: g.bias, grad, jnp.sum(d_pre, axis=1))
            speed = time_rate = self.flow.speed(model, self.initial, grad, value)
        else:
            time_rate = jnp.zeros((), self.X.dtype)
        out = {"c": -speed * (d_pre if self.reduced else grad_first)}
        if "a" in state:
            out["a"] = -speed * d_a
        if "b" in state:
            out["b"] = -speed * jnp.sum(d_pre, axis=1)
        if self.flow.time_warped:
            out["t"] = time_rate
        return out

    def vector_field(self, clock, state, args):
        # ``args``: None, or the kink slopes (n, m) of `ClassifierKinkedDynamics` below.
        return self._field(state, args)

    def unit_speed_field(self, state, slopes):
        """The field's direction at unit clock speed with the given kink slopes."""
        return self._field(state, slopes, speed=1.0)

    def linearization(self, c, state, args):
        return None

    def gauss_newton(self, c, state, args):
        """No structured form (the span reduction's Jacobian is left to the tail's solver)."""
        return None

    def through_kinks(self, max_sliding_rows: int) -> AbstractDynamics:
        """The same reduction integrated through its kinks (`ClassifierKinkedDynamics`)."""
        return ClassifierKinkedDynamics(self.initial, self.X, self.y, self.flow, self.loss_fn,
                                        max_sliding_rows=max_sliding_rows)


class ClassifierKinkedDynamics(AbstractKinkedDynamics, ClassifierReducedDynamics):
    """`ClassifierReducedDynamics` with event-located activation switches and Filippov sliding
    (`AbstractKinkedDynamics`): the span reduction is exact for any slopes ``σ'(0) ∈ [lo, hi]``
    (the gradient still lies in the data's span), and the pre-activations ``P = W(0)Xᵀ + C G
    (+ b)`` are linear in the state, so each (example, neuron) pair's event and multiplier cost
    O(n) instead of O(d). On nearly orthogonal data a ReLU pair with ``aⱼyᵢ < 0`` that reaches
    its kink typically slides: from the dead side only the small overlaps ``⟨xₖ, xᵢ⟩`` move it.

    **Fields:** those of `ClassifierReducedDynamics`, and `max_sliding_rows` (static: at most
    this many examples may slide at once on one neuron; more is reported as degenerate
    sliding)."""

    max_sliding_rows: int = eqx.field(static=True)

    def __init__(self, initial, X, y, flow, loss_fn, *, max_sliding_rows):
        ClassifierReducedDynamics.__init__(self, initial, X, y, flow, loss_fn)
        self.max_sliding_rows = max_sliding_rows

    def preactivations(self, state) -> Float[Array, "n m"]:
        c, _, b = self._trained(state)
        return self._pre(c, b).T

    def slope_linearization(self, state, base):
        """The closed form's ingredients (see `slope_response`): ż at `base`, the loss
        derivative ``r`` at the outputs, the Gram matrix (``+ β``) and the output weights."""
        c, a, b = self._trained(state)
        outputs = a @ leaky_relu(self._pre(c, b), jax.lax.stop_gradient(self.initial.slope))
        r = jax.grad(lambda f: self.loss_fn(f, self.y))(outputs)  # (n,)
        gram = self.gram if b is None else self.gram + 1.0
        zdot0 = -(gram @ (base * r[:, None])) * a[None, :]  # (n, m)
        return zdot0, r, gram, a

    def slope_response(self, state, base, index, mask, linearization):
        """Closed form of `AbstractKinkedDynamics.slope_response`: on the direction,
        ``Ċ = −D`` (``ḃ = −D1``) with ``Dⱼₗ = aⱼ λₗⱼ rₗ`` and ``r = ∂ℓ/∂f`` at the outputs (which
        do not depend on the slopes, as ``σ(0) = 0``), so ``żᵢⱼ = −aⱼ Σₗ λₗⱼ rₗ (Gₗᵢ + β)``, with
        ``β = 1`` for a trained bias. Neuron j's matrix is ``−aⱼ (G + β)[Iⱼ, Iⱼ] diag(r[Iⱼ])``
        over its examples ``Iⱼ = index[j]``: O(m K²) numbers instead of K evaluations of the
        field that the generic `linear_response` needs."""
        zdot0, r, gram, a = linearization
        block = gram[index[:, :, None], index[:, None, :]] * r[index][:, None, :]  # (m, K, K)
        return zdot0, -a[:, None, None] * block
