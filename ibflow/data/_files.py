"""Checksums, safe reads and error messages shared by the local-file loaders (MNIST, CIFAR-10).

Trust model: a file is checked against a digest the caller passes (``checksums={name: hex}``) or,
failing that, the digest published by the data set's authors (the tables in the loaders). Nothing
next to the data (no sidecar ``.md5``) is trusted: whoever can replace the data can replace it.
No loader ever deserializes Python objects; every format is parsed with numpy from raw bytes.
"""

import hashlib
import zlib
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
#: Most bytes a loader decompresses from one gzip file or reads from one archive member (the
#: largest file of the supported data sets, MNIST's training images, is 47 MB uncompressed): a
#: small crafted file cannot make a loader allocate gigabytes.
MAX_DECOMPRESSED_BYTES = 256 * 1024**2


class DataFileError(ValueError):
    """A data file is malformed, truncated or fails its checksum; the message names the file."""


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _algorithm(expected: str, name: str) -> str:
    """md5 for 32 hex digits, sha256 for 64."""
    expected = expected.strip().lower()
    if len(expected) == 32 and all(c in "0123456789abcdef" for c in expected):
        return "md5"
    if len(expected) == 64 and all(c in "0123456789abcdef" for c in expected):
        return "sha256"
    raise ValueError(f"checksums[{name!r}] must be an md5 (32 hex digits) or sha256 (64 hex "
                     f"digits) digest; got {expected!r}.")


def verify(path: Path, *, official: dict[str, str], checksums: dict[str, str] | None,
           verify: bool) -> str:
    """Check ``path`` against ``checksums[name]`` (caller supplied) if given, else the
    ``official`` (published) table. Returns how it was checked ("user", "official", "none").
    A mismatch raises `DataFileError` naming the file and both digests."""
    if not verify:
        return "none"
    check_checksums(checksums)
    name = path.name
    for source, expected in (("user", (checksums or {}).get(name)),
                             ("published", official.get(name))):
        if expected is None:
            continue
        algorithm = _algorithm(expected, name)
        got = _digest(path, algorithm)
        if got != expected.strip().lower():
            raise DataFileError(
                f"checksum mismatch for {path}: expected {algorithm} {expected} ({source}), got "
                f"{got}. The file is corrupt, truncated or not the expected release; pass "
                "checksums={...} for a different release or verify_checksums=False to skip "
                "the check.")
        return source
    return "none"


def check_checksums(checksums) -> None:
    """`checksums` is None or a dict of file name -> hex digest string; ValueError otherwise."""
    if checksums is None:
        return
    if not isinstance(checksums, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in checksums.items()):
        raise ValueError("checksums must be a dict {file name: md5 or sha256 hex digest}; got "
                         f"{type(checksums).__name__} {checksums!r:.80}.")


def gunzip(raw: bytes, path: Path, limit: int | None = None) -> bytes:
    """Decompress gzip bytes read from ``path`` (every member), at most `limit` bytes (default
    `MAX_DECOMPRESSED_BYTES`); a truncated or fake gzip, or one that expands beyond the limit,
    names the file."""
    limit = MAX_DECOMPRESSED_BYTES if limit is None else limit
    out, rest = bytearray(), raw
    try:
        while rest:
            stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += stream.decompress(rest, limit + 1 - len(out))
            if len(out) > limit:
                raise DataFileError(f"{path} decompresses to more than {limit} bytes (the cap "
                                    "MAX_DECOMPRESSED_BYTES); it is not a file of this data "
                                    "set.")
            if not stream.eof:
                raise DataFileError(f"{path} is a truncated gzip file (the compressed stream "
                                    "ends early); download it again.")
            rest = stream.unused_data
    except zlib.error as e:
        raise DataFileError(f"{path} starts like a gzip file but is not a valid one ({e}).") \
            from None
    return bytes(out)


def missing_error(dataset: str, root: Path, expected: list[str], hint: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{dataset}: files not found under {root}. Expected: {', '.join(expected)}. {hint} "
        "ibflow never downloads data; fetch the files yourself and pass their folder.")
