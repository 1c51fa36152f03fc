"""The generic dynamics: a flow on the trainable leaves of any Equinox module."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from .._flows.base import AbstractFlow
from .._losses import AbstractLoss
from .._tail.jacobian import LowRankJacobian, gated
from .base import AbstractStationaryEndDynamics


class ParameterDynamics(AbstractStationaryEndDynamics):
    """``dθ/dc = −speed·P⊙∇L(θ)`` on the inexact-array leaves θ of ``initial`` (any
    ``eqx.Module`` whose ``__call__(x)`` returns a scalar), with the real time ``t`` as a second
    state entry when the flow is time-warped.

    Its tail linearization is the generalized Gauss–Newton form of [THEORY §8.1][theory-8-1],
    ``F' ≈ −speed · P · Jᵀ H J`` with J the n × p Jacobian of the outputs and H the (diagonal of
    the) loss's Hessian in the outputs (``1/n`` for the square loss): exact up to terms that vanish
    with the residuals, and handed to the tail as a low-rank `LowRankJacobian` (O(n·p) memory).

    The ODE state is one flat vector (`jax.flatten_util.ravel_pytree` of ``{"theta": θ, "t":
    t}``), not the parameters' PyTree: Diffrax's per-step work (stage buffers, error norms,
    interpolation) then runs once instead of once per leaf, which on a small model is most of
    a step's cost.
    """

    initial: eqx.Module
    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    flow: AbstractFlow
    loss_fn: AbstractLoss

    def _static(self):
        return eqx.filter(self.initial, eqx.is_inexact_array, inverse=True)

    def data_loss(self, model):
        return self.loss_fn(jax.vmap(model)(self.X), self.y)

    def per_example(self, model, args):
        """``(f, inputs)`` with ``f(model, inputs[i])`` the output on example i as the vector
        field sees it in mode ``args``: the model itself here; switching dynamics fix the slopes
        at kinks (`ibflow._kinks`)."""
        return (lambda m, x: m(x)), self.X

    def outputs(self, model, args):
        f, inputs = self.per_example(model, args)
        return jax.vmap(f, in_axes=(None, 0))(model, inputs)

    def _tree(self):
        state = {"theta": eqx.filter(self.initial, eqx.is_inexact_array)}
        if self.flow.time_warped:
            state["t"] = jnp.zeros((), dtype=self.X.dtype)
        return state

    def _unravel(self, flat):
        return ravel_pytree(self._tree())[1](flat)

    def initial_state(self):
        return ravel_pytree(self._tree())[0]

    def model(self, state):
        return eqx.combine(self._unravel(state)["theta"], self._static())

    def loss(self, state):
        return self.data_loss(self.model(state))

    def time(self, c, state):
        return self._unravel(state)["t"] if self.flow.time_warped else c

    def _speed_and_preconditioner(self, model, grad, value):
        return (self.flow.speed(model, self.initial, grad, value),
                self.flow.preconditioner(model, self.initial))

    def _value_and_grad(self, model, args):
        return eqx.filter_value_and_grad(
            lambda m: self.loss_fn(self.outputs(m, args), self.y))(model)

    def _field(self, model, grad, speed, time_rate):
        pre = self.flow.preconditioner(model, self.initial)
        if pre is None:
            velocity = jax.tree_util.tree_map(lambda g: -speed * g, grad)
        else:
            velocity = jax.tree_util.tree_map(lambda g, p: -speed * p * g, grad, pre)
        out = {"theta": velocity}
        if self.flow.time_warped:
            out["t"] = time_rate
        return ravel_pytree(out)[0]

    def vector_field(self, c, state, args):
        model = self.model(state)
        value, grad = self._value_and_grad(model, args)
        speed = self.flow.speed(model, self.initial, grad, value)
        return self._field(model, grad, speed, speed)

    def unit_speed_field(self, state, args):
        """The field at unit clock speed, ``−P⊙∇L`` (the real time's rate 0): its direction,
        which the flow's scalar speed only rescales."""
        model = self.model(state)
        _, grad = self._value_and_grad(model, args)
        return self._field(model, grad, 1.0, jnp.zeros((), self.X.dtype))

    def linearization(self, c, state, args):
        """The Gauss–Newton form (`gauss_newton`), or the exact dense Jacobian for a small state
        far from the interpolation set (`ibflow._tail.jacobian.gated`)."""
        return gated(self.gauss_newton(c, state, args),
                     lambda s: self.vector_field(c, s, args), state, self.loss(state),
                     self.loss_fn(jnp.zeros_like(self.y), self.y))

    def gauss_newton(self, c, state, args):
        """The generalized Gauss–Newton form of the field's Jacobian at ``state`` in mode
        ``args`` (a `LowRankJacobian`: ``−U V`` with V the n × p output Jacobian)."""
        model = self.model(state)
        outputs = self.outputs(model, args)
        # Diagonal of the loss's Hessian in the outputs (1/n for the square loss).
        h = jnp.diag(jax.hessian(self.loss_fn)(outputs, self.y))
        f, inputs = self.per_example(model, args)
        jac = jax.vmap(lambda x: eqx.filter_grad(lambda m: f(m, x))(model))(inputs)
        jac = eqx.filter(jac, eqx.is_inexact_array)
        value, grad = self._value_and_grad(model, args)
        speed, pre = self._speed_and_preconditioner(model, grad, value)

        def u_leaf(j, p=None):
            weight = (speed * h).reshape((-1,) + (1,) * (j.ndim - 1))
            return weight * j if p is None else weight * p[None] * j

        u = (jax.tree_util.tree_map(u_leaf, jac) if pre is None
             else jax.tree_util.tree_map(u_leaf, jac, pre))
        U, V = {"theta": u}, {"theta": jac}
        if self.flow.time_warped:
            zeros = jnp.zeros(self.X.shape[0], dtype=self.X.dtype)
            U["t"], V["t"] = zeros, zeros
        rows = jax.vmap(lambda tree: ravel_pytree(tree)[0])
        return LowRankJacobian(U=rows(U), V=rows(V))
