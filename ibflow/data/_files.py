"""Checksums and missing-file messages shared by the local-file loaders (MNIST, CIFAR-10)."""

import hashlib
from pathlib import Path


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _algorithm(expected: str) -> str:
    """md5 for 32 hex digits, sha256 for 64."""
    expected = expected.strip().lower()
    if len(expected) == 32:
        return "md5"
    if len(expected) == 64:
        return "sha256"
    raise ValueError(f"a checksum must be an md5 (32 hex digits) or sha256 (64 hex digits) "
                     f"digest; got {expected!r}.")


def _sidecar(path: Path) -> str | None:
    for suffix in (".sha256", ".md5"):
        side = path.with_name(path.name + suffix)
        if side.is_file():
            text = side.read_text().split()
            if text:
                return text[0]
    return None


def verify(path: Path, *, official: dict[str, str], checksums: dict[str, str] | None,
           verify: bool) -> str:
    """Check ``path`` against, in order of precedence: ``checksums[name]`` (user supplied), a
    sidecar file ``<name>.sha256`` / ``<name>.md5`` next to it (first token = hex digest), the
    ``official`` table. Returns how it was checked ("user", "sidecar", "official", "none").
    A mismatch raises ``ValueError`` naming the file and both digests."""
    if not verify:
        return "none"
    name = path.name
    for source, expected in (("user", (checksums or {}).get(name)), ("sidecar", _sidecar(path)),
                             ("official", official.get(name))):
        if expected is None:
            continue
        algorithm = _algorithm(expected)
        got = _digest(path, algorithm)
        if got != expected.strip().lower():
            raise ValueError(
                f"checksum mismatch for {path}: expected {algorithm} {expected} ({source}), got "
                f"{got}. The file is corrupt or not the expected release; pass checksums={{...}} "
                f"for a different release or verify=False to skip the check.")
        return source
    return "none"


def missing_error(dataset: str, root: Path, expected: list[str], hint: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{dataset}: files not found under {root}. Expected: {', '.join(expected)}. {hint} "
        "ibflow never downloads data; fetch the files yourself and pass their folder.")
