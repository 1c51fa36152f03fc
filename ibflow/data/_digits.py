"""scikit-learn's bundled handwritten digits (8×8, offline) as a small real benchmark."""

from ._mixture import ClassificationData, binary_task


def digits(
    *, task: str = "parity", n: int | None = 100, n_test: int = 0, seed: int = 0,
    center: bool = False,
) -> ClassificationData:
    """A binary task on ``sklearn.datasets.load_digits`` (1797 images of 8×8 pixels in 0..16,
    shipped with scikit-learn, so nothing is downloaded).

    `task`: ``"parity"`` (default: even digits +1, odd −1; 1797 examples, not linearly trivial)
    or ``"0-vs-1"`` (360 examples, easy). Inputs are the 64 pixels divided by 16, so in [0, 1];
    all entries are ≥ 0, so the data are far from orthogonal (`near_orthogonality` ≫ 1) — the
    contrast to the Gaussian mixture of [THEORY §4.0][theory-4-0]. `n`, `n_test`, `seed`, `center`:
    as in `binary_task` (balanced random subsets; n = 100 keeps flows fast).
    """
    from sklearn.datasets import load_digits

    if task not in ("parity", "0-vs-1"):
        raise ValueError(f"task must be 'parity' or '0-vs-1'; got {task!r}.")
    bunch = load_digits()
    if task == "parity":
        positive, negative = (0, 2, 4, 6, 8), (1, 3, 5, 7, 9)
    elif task == "0-vs-1":
        positive, negative = (0,), (1,)
    else:
        raise ValueError(f"task must be 'parity' or '0-vs-1'; got {task!r}.")
    return binary_task(bunch.images, bunch.target, positive=positive, negative=negative, n=n,
                       n_test=n_test, seed=seed, scale=16.0, center=center)
