"""CIFAR-10 from its local *binary* distribution (``cifar-10-binary.tar.gz``); nothing is
downloaded and nothing is deserialized as Python objects."""

import tarfile
from pathlib import Path

import numpy as np

from ._files import (
    GZIP_MAGIC,
    MAX_DECOMPRESSED_BYTES,
    DataFileError,
    check_checksums,
    missing_error,
    verify,
)

#: md5 published on https://www.cs.toronto.edu/~kriz/cifar.html for the binary distribution.
#: The per-batch ``.bin`` files have no published digest.
CIFAR10_MD5 = {"cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"}
ARCHIVE = "cifar-10-binary.tar.gz"
FOLDER = "cifar-10-batches-bin"
_BATCHES = {"train": [f"data_batch_{k}.bin" for k in range(1, 6)], "test": ["test_batch.bin"]}
_RECORD = 1 + 3072  # one label byte, then 1024 red, 1024 green, 1024 blue bytes
_PY_SERIAL_PROTOCOL = 0x80


def _parse_batch(raw: bytes, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Records of 1 label byte + 3072 pixel bytes (CIFAR-10 binary format), parsed with numpy."""
    if len(raw) == 0:
        raise DataFileError(f"{source} is empty; expected CIFAR-10 binary records of "
                            f"{_RECORD} bytes.")
    if raw[0] == _PY_SERIAL_PROTOCOL or raw[:2] == GZIP_MAGIC:
        serial = raw[0] == _PY_SERIAL_PROTOCOL
        kind = "like a serialized Python object" if serial else "gzip-compressed"
        raise DataFileError(
            f"{source} looks {kind}, not a CIFAR-10 binary batch; ibflow never deserializes "
            f"Python objects from data. Use the binary distribution ({ARCHIVE}).")
    if len(raw) % _RECORD:
        raise DataFileError(
            f"{source} is truncated or not a CIFAR-10 binary batch: {len(raw)} bytes is not a "
            f"whole number of {_RECORD}-byte records ({len(raw) // _RECORD} records and "
            f"{len(raw) % _RECORD} bytes left over).")
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise DataFileError(f"{source}: record {bad} has label {labels[bad]}, outside 0..9; not "
                            "a CIFAR-10 binary batch.")
    # Each image is 1024 red, 1024 green, 1024 blue values, each a 32×32 image in row-major order.
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _read_archive(path: Path, names: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Read the named members from the tarball in memory (nothing is extracted to disk)."""
    out = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for name in names:
                member = f"{FOLDER}/{name}"
                try:
                    info = tar.getmember(member)
                except KeyError:
                    raise DataFileError(f"{path} has no member {member}; not the CIFAR-10 binary "
                                        "distribution.") from None
                f = tar.extractfile(info) if info.isfile() else None
                if f is None:
                    raise DataFileError(f"{path}: member {member} is not a regular file.")
                if info.size > MAX_DECOMPRESSED_BYTES:
                    raise DataFileError(f"{path}: member {member} is {info.size} bytes, more "
                                        f"than the cap MAX_DECOMPRESSED_BYTES; not a CIFAR-10 "
                                        "batch.")
                out.append(_parse_batch(f.read(), f"{path}:{member}"))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataFileError(f"{path} is truncated or not a valid .tar.gz archive ({e}); "
                            "download it again.") from None
    return out


def load_cifar10(
    root: str | Path, *, split: str = "train", checksums: dict[str, str] | None = None,
    verify_checksums: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 32, 32, 3) uint8 (HWC) and labels (N,) int64 of CIFAR-10's `split` ("train": the
    five ``data_batch_k.bin``, 50 000 images; "test": ``test_batch.bin``) from the folder `root`.

    `root` holds either the archive ``cifar-10-binary.tar.gz`` (read in memory, never extracted)
    or its extracted folder ``cifar-10-batches-bin`` (or `root` is that folder). The *binary*
    distribution is parsed with numpy (records of 1 label byte + 3072 pixel bytes); the python
    distribution's serialized-object batches are never read, so a data file cannot execute code.

    **Checksums.** The archive is checked against ``checksums[name]`` if you give one, else the
    published md5 (`CIFAR10_MD5`). Extracted ``.bin`` files have no published digest: they are
    checked only against ``checksums`` you pass (by file name), otherwise read unchecked but
    validated (whole records, labels in 0..9). ``verify_checksums=False`` skips the checks.

    **Raises:** ``FileNotFoundError`` naming `root` and the expected files when neither form is
    there; `DataFileError` (a ``ValueError``) naming the file for a checksum mismatch, a
    truncated or fake archive, a truncated batch or one that is not in the binary format.
    """
    if split not in _BATCHES:
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}.")
    check_checksums(checksums)
    root = Path(root)
    names = _BATCHES[split]
    archive = root / ARCHIVE
    if archive.is_file():
        verify(archive, official=CIFAR10_MD5, checksums=checksums, verify=verify_checksums)
        parts = _read_archive(archive, names)
    else:
        folder = root / FOLDER if (root / FOLDER).is_dir() else root
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            hint = f"(missing: {', '.join(missing)}.)"
            if (root / "cifar-10-batches-py").is_dir() or (root / "data_batch_1").is_file():
                hint += (" Found the python distribution (serialized Python objects), which "
                         f"ibflow never reads; use the binary distribution {ARCHIVE}.")
            raise missing_error("CIFAR-10", root, [ARCHIVE, f"or {FOLDER}/" + ", ".join(names)],
                                hint)
        parts = []
        for name in names:
            verify(folder / name, official=CIFAR10_MD5, checksums=checksums,
                   verify=verify_checksums)
            parts.append(_parse_batch((folder / name).read_bytes(), str(folder / name)))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
