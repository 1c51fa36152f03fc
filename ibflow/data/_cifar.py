"""CIFAR-10 from the local "python version" batches; nothing is downloaded."""

import pickle
from pathlib import Path

import numpy as np

from ._files import missing_error, verify

#: md5 of the official python batches (inside cifar-10-python.tar.gz; as used by torchvision).
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
_BATCHES = {"train": [f"data_batch_{k}" for k in range(1, 6)], "test": ["test_batch"]}


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{path} is not a CIFAR-10 python batch (a pickled dict with b'data' "
                         "and b'labels').")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"{path}: data {data.shape} and labels {labels.shape} are not "
                         "(N, 3072) and (N,).")
    # Rows are 1024 red, 1024 green, 1024 blue values, each a 32×32 image in row-major order.
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def load_cifar10(
    root: str | Path, *, split: str = "train", checksums: dict[str, str] | None = None,
    verify_checksums: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 32, 32, 3) uint8 (HWC) and labels (N,) int64 of CIFAR-10's `split` ("train": the
    five ``data_batch_k``, 50 000 images; "test": ``test_batch``) from the folder `root` (the
    extracted ``cifar-10-batches-py``; `root` may also be its parent).

    Each batch is checked against ``checksums[name]`` (md5/sha256 you give), else a sidecar
    ``<name>.sha256``/``<name>.md5``, else the published md5 (`CIFAR10_MD5`);
    ``verify_checksums=False`` skips the checks. A missing batch raises ``FileNotFoundError``
    naming `root` and the expected files. Batches are unpickled: only load files you trust.
    """
    if split not in _BATCHES:
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}.")
    root = Path(root)
    if not (root / _BATCHES[split][0]).is_file() and (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    missing = [name for name in _BATCHES[split] if not (root / name).is_file()]
    if missing:
        raise missing_error("CIFAR-10", root, _BATCHES[split], f"(missing: {', '.join(missing)}.)")
    images, labels = [], []
    for name in _BATCHES[split]:
        verify(root / name, official=CIFAR10_MD5, checksums=checksums, verify=verify_checksums)
        x, y = _read_batch(root / name)
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)
