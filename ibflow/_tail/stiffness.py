"""Stiffness detection for the explicit phase: once the loss is small, an explicit solver that
needs more than `STIFF_WINDOW` steps for one decade of loss is held at its stability limit by
the stiff tail ([THEORY §8.1][theory-8-1]), and the implicit tail should take over before the fixed
``stiff_switch`` level.

Why a count of steps per decade: accuracy-limited Tsit5 steps at ``rtol = 1e-10`` are
``h·λ ≈ 0.01`` (≈ 115 steps per decade of a mode's loss; ≈ 290 at ``rtol = 1e-12``), while a
step held at the stability limit is ``h·λ_max ≈ 3.3`` and a decade costs ``≈ 0.35·κ`` steps,
``κ = λ_max/λ_min``. A stiff tail such as that of the ReLU ``ShallowNet`` of width 4096 under
mirror flow costs about 2 000 explicit steps per decade from ``L ≈ 1e-2·L₀`` on, so a window of
1000 lies between the two regimes and hands such a tail to the implicit solver decades before
the fixed switch. Above `STIFF_CEILING` the count
does not run: the plateaus of small initializations (a saddle's escape at constant loss) are
not stiffness, and an implicit step there costs n vector-Jacobian products for nothing.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

#: Attempted steps without a decade of loss decrease that mark the explicit phase as stiff.
STIFF_WINDOW = 1000
#: The count runs only below this fraction of the loss scale ``mean(y²)/2``.
STIFF_CEILING = 1e-2


class StiffnessWatch(eqx.Module):
    """What `BudgetController` needs to detect stiffness: the loss of a state and the level
    (absolute) below which steps per decade are counted."""

    loss: object  # state -> scalar loss
    ceiling: Float[Array, ""]
    #: whether the watch counts at all (False: a leg of the segment loop that does not watch,
    #: in a solve shared by several legs; the loss is then not evaluated)
    on: Bool[Array, ""] | bool = True

    def update(self, steps, keep, y1, mark_loss, mark_steps):
        """The new decade mark ``(loss, steps)`` and whether the phase is now stiff."""

        def count():
            loss = self.loss(y1)
            reset = keep & ((loss <= 0.1 * mark_loss) | (loss > self.ceiling)
                            | ~jnp.isfinite(loss))
            stiff = keep & (loss <= self.ceiling) & (
                steps - jnp.where(reset, steps, mark_steps) >= STIFF_WINDOW)
            return (jnp.where(reset, loss, mark_loss), jnp.where(reset, steps, mark_steps),
                    stiff)

        if self.on is True:
            return count()
        return jax.lax.cond(self.on, count, lambda: (mark_loss, mark_steps, jnp.array(False)))

    def where(self, on) -> "StiffnessWatch":
        """This watch where `on` holds (unbatched: the segment loop's leg is one per batch),
        else one that does not count: a leg of the segment loop that watches, in a solve
        shared by several legs."""
        return StiffnessWatch(loss=self.loss, ceiling=self.ceiling, on=jnp.asarray(on))
