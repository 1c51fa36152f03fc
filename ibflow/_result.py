"""One base for every result ibflow returns: a status, `converged`, and a printable summary."""

import dataclasses

import equinox as eqx
import numpy as np
from jaxtyping import Array, Bool

from ._status import STATUS_NAMES, Status


class AbstractResult(eqx.Module):
    """What every result shares (`Solution`, `RegularizerMinimum`, `DescentResult`, `LimitPoint`,
    `ShapeOptimization`, `VariationalSolution`, `SweepResult`, `Certificate`, the Newton
    routine's `NewtonResult`): a `Status` item (one per member under
    ``vmap``), the test ``converged``, and a one-line `summary` for printing."""

    status: eqx.AbstractVar[Status]

    @property
    def converged(self) -> Bool[Array, "*batch"]:
        """``status == Status.converged`` (an array of booleans for a batch)."""
        return self.status == Status.converged

    def summary(self) -> str:
        """``"Name(status, field=value, ...)"``: the status by name (counted per item for a
        batch), scalar fields by value, array fields by shape; nested results and models by
        type. Host-side (call it outside ``jit``)."""
        codes = np.asarray(self.status._value).ravel()
        if codes.size == 1:
            parts = [STATUS_NAMES[int(codes[0])]]
        else:
            names, counts = np.unique(codes, return_counts=True)
            parts = [", ".join(f"{STATUS_NAMES[int(c)]}: {k}" for c, k in zip(names, counts))]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "status" or value is None:
                continue
            if eqx.is_array(value):
                arr = np.asarray(value)
                parts.append(f"{field.name}={arr.item():.6g}" if arr.size == 1 and
                             arr.dtype.kind in "fiu" else f"{field.name}: shape {arr.shape}")
            elif isinstance(value, str | int | float):
                parts.append(f"{field.name}={value}")
            else:
                parts.append(f"{field.name}: {type(value).__name__}")
        return f"{type(self).__name__}({'; '.join(parts)})"
