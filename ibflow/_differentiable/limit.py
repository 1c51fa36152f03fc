"""``limit_point``: the differentiable limit of gradient flow from an initialization, by the
implicit route (exact regularizer + implicit function theorem) or through the ODE solve."""

from typing import Literal

from jaxtyping import Array, ArrayLike, Float

from .._models.base import AbstractModel, AbstractPredictorModel
from .._result import AbstractResult
from .._solution import Solution
from .._status import Status
from .._theory.implicit_bias import implicit_bias
from .._theory.minimizer import RegularizerMinimum
from .implicit import differentiable_minimize
from .through_solve import solve_limit


class LimitPoint(AbstractResult):
    """The limit predictor of a flow, differentiable in the initialization and the data.

    **Fields:**
    - `predictor`: (d,) the end-to-end weight ``w̃(∞)``.
    - `status`: the `Status` of the computation that produced it (the minimizer's for
      ``route="implicit"``, the flow's for ``route="solve"``); `converged` tests it.
    - `minimum`: the `RegularizerMinimum` (implicit route) or None.
    - `solution`: the `Solution` of `ibflow.integrate` (solve route) or None.
    """

    predictor: Float[Array, " d"]
    status: Status
    minimum: RegularizerMinimum | None
    solution: Solution | None


def limit_point(
    model: AbstractModel, X: Float[ArrayLike, "n d"], y: Float[ArrayLike, " n"], *,
    route: Literal["implicit", "solve"] = "implicit",
    final_sign: Float[ArrayLike, ""] | None = None, rtol: Float[ArrayLike, ""] | None = None,
    max_steps: int | None = None, checkpoints: int | None = None, throw: bool = True,
    **integrate_options,
) -> LimitPoint:
    """Where gradient flow on the square loss goes from `model`, as a differentiable function
    of every array in `model` (so of scale and shape, scalar or per coordinate, through
    ``from_scale_shape``) and of the data `X`, `y`. Compose with any scalar objective and
    ``jax.grad``; jittable and vmappable.

    - ``route="implicit"`` (default, cheap and exact): ``w̃(∞) = argmin Q s.t. Xw̃ = b`` with
      ``Q = ibflow.implicit_bias(model)`` ([THEORY AZ-T1][theory-az-t1]/[AZ-A][theory-az-a] diagonal
      net, [AZ-FC-Q][theory-az-fc-q] single linear neuron, [AZ-T4][theory-az-t4] leaky neuron),
      solved by `differentiable_minimize` and differentiated through its KKT system. Raises
      `ibflow.NoExactRegularizer` for models
      without an exact regularizer (e.g. width > 1, [THEORY §2.6][theory-2-6]): use
      ``route="solve"``.
    - ``route="solve"``: integrate the flow (`ibflow.integrate`) and differentiate through
      the solve with recursive checkpointing (`checkpoints`, see `solve_limit`); works for
      every model, flow and loss `ibflow.integrate` supports.

    **Arguments:**
    - `model`: the initialization (an `AbstractPredictorModel`). `X` (n, d), `y` (n,).
    - `final_sign`: implicit route, single-neuron models with δ < 0 only ([THEORY §2.4][theory-2-4]
      flip rule; see `ibflow.implicit_bias`).
    - `rtol`, `max_steps`: the minimizer's (implicit) or the integrator's (solve) tolerance
      and step budget; None keeps each one's default.
    - `checkpoints`: solve route, number of checkpoints of the reverse pass.
    - `throw`: raise when the computation did not converge (otherwise read `converged`).
    - `**integrate_options`: solve route, passed to `ibflow.integrate` (e.g.
      ``formulation=ibflow.ParameterSpace()`` to integrate the parameters rather than a
      closed-form reduction).
    """
    if not isinstance(model, AbstractPredictorModel):
        raise ValueError(f"limit_point needs a model with a predictor; got {type(model).__name__}.")
    options = {} if rtol is None else {"rtol": rtol}
    if max_steps is not None:
        options["max_steps"] = max_steps
    if route == "implicit":
        extra = sorted(integrate_options) + ([] if checkpoints is None else ["checkpoints"])
        if extra:
            raise ValueError(f"checkpoints and integrate options apply to route='solve' only; "
                             f"got {extra}.")
        minimum = differentiable_minimize(implicit_bias(model, final_sign=final_sign), X, y,
                                          throw=throw, **options)
        return LimitPoint(predictor=minimum.w, status=minimum.status, minimum=minimum,
                          solution=None)
    if route == "solve":
        if final_sign is not None:
            raise ValueError("final_sign applies to route='implicit' only (the flow finds "
                             "the sign of a itself).")
        sol = solve_limit(model, X, y, checkpoints=checkpoints, throw=throw, **options,
                          **integrate_options)
        return LimitPoint(predictor=sol.predictor, status=sol.status, minimum=None,
                          solution=sol)
    raise ValueError(f"route must be 'implicit' or 'solve'; got {route!r}.")
