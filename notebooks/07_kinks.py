# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 — Through the kinks: a leaky-ReLU neuron that slides
#
# docs/theory §2.5 (Theorem 4) and §8.2. The neuron $f(x)=a\,\sigma(\langle w,x\rangle)$ with
# $\sigma(z)=\max(z,\gamma z)$ has a kink at $z=0$. When a pre-activation $z_i=\langle w,x_i\rangle$
# reaches 0 and the one-sided vector fields push into $z_i=0$ from both sides, gradient flow is a
# Filippov *sliding mode*: $z_i$ stays at 0 and the slope $\sigma'(0)=\lambda_i\in[\gamma,1]$ is
# whatever keeps it there (the equivalent control). An adaptive ODE solver that sees only the
# one-sided slopes chatters across the kink with tiny steps.
#
# `ibflow.integrate` locates every crossing as an event, decides crossing / sliding / leaving from
# the one-sided fields, integrates the sliding field, and reports the events in
# `Solution.kinks`. The limit is checked against Theorem 4's independent reference:
# $\operatorname{argmin} Q$ on the affine interpolation set (`ibflow.minimize_regularizer`).
#
# With `IBFLOW_SMALL=1` in the environment the smooth-solver comparison gets a small budget (the
# test suite executes it that way). Randomness comes from explicit JAX keys only.

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import ibflow

SMALL = os.environ.get("IBFLOW_SMALL") == "1"
gamma, n, d = 0.3, 8, 30
kx, km, kz = jax.random.split(jax.random.key(2), 3)
X = jax.random.normal(kx, (n, d))
model = ibflow.LeakyReLUNeuron.from_scale_shape(1.0, 0.0, dim=d, slope=gamma, key=km)
z_star = jax.random.normal(kz, (n,))
y = jnp.where(z_star >= 0, z_star, gamma * z_star)  # realizable, mixed signs

save_at = jnp.logspace(-3, 4, 400)
sol = ibflow.integrate(model, X, y, save_at=save_at)
report = sol.kinks
print(ibflow.Status[sol.status])
print(f"steps {int(sol.steps)}, switches {int(report.switches)}, slides {int(report.slides)}, "
      f"exits {int(report.exits)}, time sliding {float(report.sliding_time):.3g} "
      f"of {float(sol.time):.3g}")
print("final pattern (z > 0):", np.asarray(report.pattern[:, 0]).astype(int),
      " sliding at the end:", np.asarray(report.sliding[:, 0]).astype(int))

# %% [markdown]
# ## The limit against Theorem 4
# For the final sign of $a$, Theorem 4 gives the limit's predictor $\tilde w = a w$ as the
# minimizer of an explicit potential $Q$ on $\{\tilde w: \operatorname{sign}(a)\,
# \sigma(\operatorname{sign}(a)\langle \tilde w, x_i\rangle) = y_i\}$.

# %%
Q = ibflow.implicit_bias(model, final_sign=jnp.sign(sol.model.a))
reference = ibflow.minimize_regularizer(Q, X, y)
distance = float(jnp.linalg.norm(sol.predictor - reference.w) / jnp.linalg.norm(reference.w))
print(f"relative distance to argmin Q: {distance:.2e}")
assert distance < 1e-9

# %% [markdown]
# ## Pre-activations along the flow, with the events marked
# Each curve is one example's $z_i(t)$. Dotted lines: crossings; solid green: a pre-activation
# starts to slide (it then stays at 0); solid red: it leaves the kink.

# %%
traj = sol.trajectory
ok = np.asarray(traj.valid)
t = np.asarray(traj.time)[ok]
z = np.asarray(jax.vmap(lambda m: jax.vmap(m.preactivations)(X))(traj.models))[ok, :, 0]
style = {0: ("gray", ":"), 1: ("tab:green", "-"), 2: ("tab:red", "-")}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for ax, scale in zip(axes, ("log", "linear")):
    ax.plot(t, z, lw=1)
    for c, kind in zip(np.asarray(report.event_clock), np.asarray(report.event_kind)):
        if kind >= 0:
            color, ls = style[int(kind)]
            ax.axvline(c, color=color, ls=ls, lw=0.8)
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xscale=scale, xlabel="gradient-flow time t", ylabel=r"$z_i(t)=\langle w, x_i\rangle$")
axes[1].set_xlim(0, 3 * float(np.nanmax(np.where(np.asarray(report.event_kind) >= 0,
                                               np.asarray(report.event_clock), np.nan))))
axes[0].set_title(f"{int(report.slides)} slides, {int(report.switches)} switches")
axes[1].set_title("the events, linear time")
fig.tight_layout()

# %% [markdown]
# ## The same flow without kink handling
# `formulation=ibflow.ParameterSpace(kinks=False)` integrates the model as if it were smooth
# (autodiff's one-sided slope at 0). On a sliding mode the adaptive solver chatters: it spends
# its whole step budget, or is stopped by the stall test, far from the limit.

# %%
smooth = ibflow.integrate(model, X, y, formulation=ibflow.ParameterSpace(kinks=False),
                          max_steps=5_000 if SMALL else 100_000, throw=False)
print(f"smooth solver: {ibflow.Status[smooth.status]}")
print(f"  steps {int(smooth.steps)}, reached t = {float(smooth.time):.3g}, "
      f"loss {float(smooth.loss):.2e} (target {float(smooth.target_loss):.1e})")
print(f"through the kinks: {int(sol.steps)} steps, loss {float(sol.loss):.2e}")
