"""The results directory of a sweep: an open format readable without ibflow.

Layout of ``out/``:
- ``sweep.json``: metadata — the full configuration (grid axes, data fingerprint, integrate
  options, chunking and member order), ibflow/JAX/diffrax versions, git commit, devices, and the
  list of member indices in each chunk.
- ``chunks/chunk-00000.npz`` …: one NumPy ``.npz`` per finished chunk, written atomically
  (temporary file + ``os.replace``), holding ``index`` (grid member indices) and one array per
  recorded field. A chunk file exists only if the chunk finished, so a killed sweep loses only
  the chunk in flight, and re-running the same command resumes.
- ``results.npz``: every field gathered into grid order (shape = grid shape [+ trailing dims]),
  plus one array per grid axis; written when all chunks are done.
Read with ``numpy.load("results.npz")`` and ``json.load(open("sweep.json"))``.
"""

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # zip entries carry a fixed timestamp: byte-reproducible
    atomic_write_bytes(path, buffer.getvalue())


def chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"chunk-{i:05d}.npz"


def fingerprint(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def write_metadata(out: Path, metadata: dict) -> None:
    atomic_write_bytes(out / "sweep.json", json.dumps(metadata, indent=2, default=str).encode())


def read_metadata(out: Path) -> dict | None:
    path = out / "sweep.json"
    return json.loads(path.read_text()) if path.exists() else None
