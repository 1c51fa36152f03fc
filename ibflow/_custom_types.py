"""Type aliases shared across ibflow (jaxtyping shapes in public signatures)."""

from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Float, PyTree

Scalar: TypeAlias = Float[Array, ""]
ScalarLike: TypeAlias = float | Float[ArrayLike, ""]
Vector: TypeAlias = Float[Array, " d"]
Inputs: TypeAlias = Float[Array, "n d"]
Targets: TypeAlias = Float[Array, " n"]
Params: TypeAlias = PyTree[Array]
Args: TypeAlias = Any

__all__ = ["Array", "ArrayLike", "Float", "PyTree", "Scalar", "ScalarLike", "Vector", "Inputs",
           "Targets", "Params", "Args"]
