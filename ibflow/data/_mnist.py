"""MNIST from local IDX files (LeCun's format); nothing is downloaded."""

from pathlib import Path

import numpy as np

from ._files import GZIP_MAGIC, DataFileError, check_checksums, gunzip, missing_error, verify

#: md5 of the official gzipped files (as published with the data set and used by torchvision).
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
_STEMS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped, detected by its magic bytes).

    Format: two zero bytes, a type code (0x08 = uint8, …), the number of dimensions k, then k
    big-endian int32 sizes and the data in C order. Raises `DataFileError` (a ``ValueError``)
    naming the file when it is a truncated or fake gzip, has a wrong magic number, or is
    truncated; ``FileNotFoundError`` when it does not exist."""
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == GZIP_MAGIC:
        raw = gunzip(raw, path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataFileError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()!r}; "
                            "expected 0000 then a type code 08, 09, 0b, 0c, 0d or 0e).")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFileError(f"{path} is a truncated IDX file: its header announces {ndim} "
                            f"dimensions ({header} header bytes) but the file has {len(raw)} "
                            "bytes.")
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">i4"))
    if any(v < 0 for v in shape):
        raise DataFileError(f"{path}: the IDX header gives a negative size {shape}.")
    dtype = np.dtype(_DTYPES[raw[2]])
    count = int(np.prod(shape)) if shape else 1
    if len(raw) - header != count * dtype.itemsize:
        kind = "truncated" if len(raw) - header < count * dtype.itemsize else "too long"
        raise DataFileError(
            f"{path} is {kind}: its IDX header says shape {shape} "
            f"({count * dtype.itemsize} bytes) but the file holds {len(raw) - header} bytes of "
            "data.")
    return np.frombuffer(raw, dtype=dtype, offset=header, count=count).reshape(shape)


def load_mnist(
    root: str | Path, *, split: str = "train", checksums: dict[str, str] | None = None,
    verify_checksums: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) uint8 and labels (N,) uint8 of MNIST's `split` ("train" or "test") from
    the folder `root`, holding ``train-images-idx3-ubyte[.gz]``, ``train-labels-idx1-ubyte[.gz]``,
    ``t10k-images-idx3-ubyte[.gz]``, ``t10k-labels-idx1-ubyte[.gz]`` (gzipped or not).

    **Checksums.** Each file is checked against ``checksums[file name]`` (md5 or sha256 hex
    digest, given by you) or, for the four official ``.gz`` files, the published md5
    (`MNIST_MD5`). Nothing found next to the data (e.g. a sidecar ``.md5``) is trusted.
    Uncompressed files without a user checksum are read unchecked (their digests are not
    published); they are parsed with numpy, never executed.
    ``verify_checksums=False`` skips all checks. A missing file raises ``FileNotFoundError`` naming
    `root` and the expected files.
    """
    if split not in _STEMS:
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}.")
    check_checksums(checksums)
    root = Path(root)
    arrays, paths = [], []
    for stem in _STEMS[split]:
        candidates = [root / (stem + ".gz"), root / stem]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise missing_error("MNIST", root, [f"{s}[.gz]" for s in _STEMS[split]],
                                f"(missing {stem}[.gz] for split={split!r}.)")
        verify(path, official=MNIST_MD5, checksums=checksums, verify=verify_checksums)
        arrays.append(read_idx(path))
        paths.append(path)
    images, labels = arrays
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DataFileError(f"MNIST under {root}: {paths[0].name} holds {images.dtype} images of "
                            f"shape {images.shape}; MNIST's are uint8 of shape (N, 28, 28).")
    if labels.dtype != np.uint8 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DataFileError(f"MNIST under {root}: {paths[1].name} holds {labels.dtype} labels of "
                            f"shape {labels.shape}; expected uint8 of shape ({images.shape[0]},) "
                            "to match the images.")
    if labels.size and labels.max() > 9:
        raise DataFileError(f"MNIST under {root}: {paths[1].name} has label {int(labels.max())}; "
                            "MNIST's labels are 0..9.")
    return images, labels
