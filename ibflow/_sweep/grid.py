"""A named cartesian grid of sweep parameters."""

import itertools

import numpy as np

#: Dimension names a sweep's labeled results use for themselves (see ``SweepResult.to_xarray``).
RESERVED_AXES = ("dataset", "coordinate")


class Grid:
    """The cartesian product of named 1-d axes, e.g. ``Grid(scale=np.logspace(-5, 0, 20),
    shape=[0, 0.5, 0.9])``. Members are enumerated in C order (last axis fastest).

    ``members()`` gives one flat array per axis (length ``size``); results are reshaped to
    ``shape`` = the axes' lengths. Values must be finite real numbers (integers stay integers,
    e.g. a ``seed`` axis); an axis named ``dataset`` or ``coordinate`` is refused (those names
    label the results).
    """

    def __init__(self, **axes):
        if not axes:
            raise ValueError("a Grid needs at least one named axis.")
        self.axes: dict[str, np.ndarray] = {}
        for name, values in axes.items():
            if name in RESERVED_AXES:
                raise ValueError(f"grid axis {name!r} is reserved for the results' own labels.")
            try:
                values = np.asarray(values)
            except (TypeError, ValueError) as e:
                raise ValueError(f"grid axis {name!r} is not an array of numbers: {e}") from None
            if values.ndim != 1 or values.size == 0:
                raise ValueError(f"grid axis {name!r} must be a non-empty 1-d sequence.")
            if values.dtype.kind not in "fiu":
                raise ValueError(f"grid axis {name!r} must be real numbers; got {values.dtype}.")
            if not np.all(np.isfinite(values)):
                raise ValueError(f"grid axis {name!r} has non-finite values: {values.tolist()}.")
            self.axes[name] = values.astype(np.float64 if values.dtype.kind == "f" else np.int64)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def members(self) -> dict[str, np.ndarray]:
        rows = list(itertools.product(*self.axes.values()))
        return {name: np.array([r[i] for r in rows], dtype=vals.dtype)
                for i, (name, vals) in enumerate(self.axes.items())}

    def describe(self) -> dict[str, list]:
        return {name: vals.tolist() for name, vals in self.axes.items()}

    def __repr__(self) -> str:
        return "Grid(" + ", ".join(f"{k}[{len(v)}]" for k, v in self.axes.items()) + ")"


def checked_grid(grid) -> Grid:
    """`grid` itself, or a ValueError naming the argument when it is not a `Grid`."""
    if not isinstance(grid, Grid):
        raise ValueError(f"grid must be an ibflow.Grid; got {type(grid).__name__}.")
    return grid
