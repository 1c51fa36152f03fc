"""The results directory of a sweep: an open format readable without ibflow.

Layout of ``out/``:
- ``sweep.json``: metadata: the full configuration (grid axes, data fingerprints, integrate
  options, chunking and member order), its hash, ibflow/JAX/diffrax versions, git commit, devices.
- ``chunks/chunk-00000.npz`` …: one NumPy ``.npz`` per finished chunk, holding ``config_hash``,
  ``dataset``, ``index`` (grid member indices) and one array per recorded field.
- ``results.npz``: every field in grid order (shape = dims [+ trailing dims]), one ``axis_<name>``
  array per dimension and ``config_hash``; written when all chunks are done.
- ``.lock``: the lock file (``fcntl.flock``) held by the run writing the directory.

Guarantees: every file is written atomically (temporary file + ``os.replace``), with the mode the
umask gives; a chunk is used only if it reads back completely, carries this sweep's config hash
and the member indices (and data set) of the chunk it is named after, and holds every field for
each of them. Anything else is recomputed, with a warning naming the file (the sweep also
warns about a chunk missing while later ones exist). One run at a time
writes a directory: a second run fails at once, naming the directory.
"""

import contextlib
import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np

from . import identity as _identity
from . import plan as _plan


def _strict(value):
    """`value` as strict JSON: non-finite floats as the strings "nan", "inf", "-inf"
    (`identity.number`), tuples as lists, anything else not JSON by its ``str``."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return _strict(value.tolist())
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _identity.number(value)
    return str(value)


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new one, never a
    part; the file gets the permissions of an ordinary ``open`` (0o666 minus the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def savez_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # zip entries carry a fixed timestamp: byte-reproducible
    return buffer.getvalue()


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz``, read eagerly (so truncation and CRC errors surface here);
    never unpickles."""
    with open(path, "rb") as handle:  # ours to close, also when the archive is unreadable
        loaded = np.load(handle, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with loaded as f:
            return {k: f[k] for k in f.files}


def fingerprint(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


@functools.cache
def git_commit() -> str | None:
    """The commit of ibflow's checkout, or None (not a git checkout, or no git). Read once per
    process: the code a process runs is what it imported."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def read_metadata(out: Path) -> dict | None:
    """``sweep.json``, or None if absent; a file that is not a JSON object warns and reads None."""
    path = Path(out) / "sweep.json"
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
        if isinstance(meta, dict) and isinstance(meta.get("config_hash"), str):
            return meta
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    warnings.warn(f"{path} is not a sweep's metadata file (corrupt?); ignoring it.", stacklevel=3)
    return None


def metadata_problem(meta: dict) -> str | None:
    """Why ``sweep.json``'s contents cannot describe the results next to it, or None. The
    configuration hash is recomputed from the configuration: a file whose axes (or anything
    else) were edited while its hash was kept is refused."""
    config = meta.get("config")
    if not isinstance(config, dict):
        return 'has no "config" object'
    missing = sorted({"axes", "datasets", "chunks", "fields", "option_axes"} - set(config))
    if missing:
        return f"has a config without {missing}"
    try:
        recomputed = _plan.config_hash(config)
    except (TypeError, ValueError) as e:  # e.g. a non-finite number written by hand
        return f"has a config that is not strict JSON ({e})"
    if recomputed != meta["config_hash"]:
        return (f"does not match its config_hash ({meta['config_hash']} stored, {recomputed} "
                "recomputed from its config): edited, or written by another version of ibflow")
    return _config_problem(config, meta.get("dims"))


def _config_problem(config: dict, dims) -> str | None:
    axes, chunks, fields = config["axes"], config["chunks"], config["fields"]
    if not isinstance(axes, dict) or not axes or not all(
            isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(
                x, bool) for x in v) for v in axes.values()):
        return "has axes that are not non-empty lists of numbers"
    if not isinstance(config["datasets"], int) or config["datasets"] < 1:
        return "has a number of data sets that is not a positive integer"
    size = int(np.prod([len(v) for v in axes.values()]))
    flat = [i for c in chunks for i in c] if isinstance(chunks, list) and all(
        isinstance(c, list) and c for c in chunks) else None
    if flat is None or sorted(flat) != list(range(size)):
        return "has chunks that do not partition the grid's members"
    if not isinstance(fields, dict) or not all(
            isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and isinstance(f[1], list)
            and all(isinstance(n, int) and n >= 0 for n in f[1]) for f in fields.values()):
        return "has fields that are not [dtype, trailing shape] pairs"
    expected = ["dataset"] * (dims is not None and "dataset" in dims) + list(axes)
    if dims is not None and dims != expected:
        return f"has dims {dims} that are not {expected}"
    return None


class Store:
    """One results directory, opened by one run (see the module docstring for the guarantees)."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"out={str(self.out)!r} exists and is not a directory.")

    @contextlib.contextmanager
    def locked(self):
        """Hold the directory's exclusive lock; a second run fails at once instead of waiting
        (its chunks would be the same; waiting silently could look like a hang)."""
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".lock", "a") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RuntimeError(f"results directory {str(self.out)!r} is being written by "
                                   "another sweep (its .lock is held); wait for that run to "
                                   "finish or choose another out.") from None
            self._remove_temporaries()
            try:
                yield self
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _remove_temporaries(self) -> None:
        """Temporary files of a killed run (never renamed into place)."""
        for folder in (self.out, self.out / "chunks"):
            for tmp in folder.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)

    def claim(self, metadata: dict) -> None:
        """Record this sweep's metadata; refuse a directory holding results of a different
        sweep (one whose only file is another sweep's ``sweep.json`` is taken over). A
        ``sweep.json`` that does not match its own hash is replaced, with a warning: chunks
        carry the hash of the configuration they were computed for, so they still verify."""
        existing = read_metadata(self.out)
        problem = None if existing is None else metadata_problem(existing)
        if problem is not None:
            warnings.warn(f"{self.out / 'sweep.json'} {problem}; replacing it.", stacklevel=3)
            self.write_metadata(metadata)
            return
        if existing is not None and existing["config_hash"] != metadata["config_hash"]:
            if not self._holds_results():  # e.g. a run that failed before its first chunk
                warnings.warn(f"{self.out / 'sweep.json'} describes another sweep but the "
                              "directory holds no results; replacing it.", stacklevel=3)
                self.write_metadata(metadata)
                return
            raise ValueError(
                f"results directory {str(self.out)!r} holds a different sweep (config hash "
                f"{existing['config_hash']} != {metadata['config_hash']}); choose another out "
                "or delete it.")
        if existing is None:
            self.write_metadata(metadata)

    def _holds_results(self) -> bool:
        return (self.out / "results.npz").exists() or any(
            (self.out / "chunks").glob("chunk-*.npz"))

    def write_metadata(self, metadata: dict) -> None:
        payload = json.dumps(_strict(metadata), indent=2, allow_nan=False).encode()
        atomic_write_bytes(self.out / "sweep.json", payload)

    def chunk_path(self, number: int) -> Path:
        return self.out / "chunks" / f"chunk-{number:05d}.npz"

    def save_chunk(self, number: int, record: dict[str, np.ndarray], *, config_hash: str,
                   dataset: int) -> None:
        arrays = dict(record) | {"config_hash": np.array(config_hash), "dataset": np.array(dataset)}
        atomic_write_bytes(self.chunk_path(number), savez_bytes(arrays))

    def save_results(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        arrays = dict(arrays) | {"config_hash": np.array(metadata["config_hash"])}
        atomic_write_bytes(self.out / "results.npz", savez_bytes(arrays))
        self.write_metadata(metadata)

    def load_chunk(self, number: int, *, config_hash: str, dataset: int, index: np.ndarray,
                   fields: dict[str, list]) -> dict[str, np.ndarray] | None:
        """The chunk's record if it verifies, else None (with a warning naming the file unless
        it is absent). Any failure to read it, of whatever kind, means "recompute": a damaged
        archive can make ``zipfile`` raise nearly anything (NotImplementedError for a flipped
        compression-method byte, for one)."""
        path = self.chunk_path(number)
        if not path.exists():
            return None
        try:
            record = read_npz(path)
            problem = _chunk_problem(record, config_hash, dataset, index, fields)
        except Exception as e:  # noqa: BLE001  (every unreadable chunk is recomputed)
            problem = f"is unreadable ({type(e).__name__}: {e})"
        if problem is not None:
            warnings.warn(f"sweep chunk file {path} {problem}; recomputing it.", stacklevel=3)
            return None
        return {k: v for k, v in record.items() if k not in ("config_hash", "dataset")}


def _chunk_problem(record, config_hash, dataset, index, fields) -> str | None:
    """Why ``record`` is not the chunk expected, or None when it is. `fields`: name ->
    ``[dtype, trailing shape]`` (`plan.expected_fields`)."""
    stored_hash = record.get("config_hash")
    if stored_hash is None or stored_hash.shape != () or stored_hash.dtype.kind != "U":
        return "has no config hash (not written by this version of ibflow?)"
    if str(stored_hash) != config_hash:
        return f"belongs to another sweep (config hash {stored_hash} != {config_hash})"
    stored, stored_dataset = record.get("index"), record.get("dataset")
    if (stored is None or stored_dataset is None or stored_dataset.shape != ()
            or stored_dataset.dtype.kind not in "iu" or int(stored_dataset) != dataset
            or stored.dtype.kind not in "iu" or stored.shape != index.shape
            or not np.array_equal(stored, index)):
        return "holds other members than its name says (copied from another chunk?)"
    names = set(record) - {"config_hash", "dataset", "index"}
    if names != set(fields):
        return f"holds fields {sorted(names)} instead of {sorted(fields)}"
    for name, (dtype, trailing) in fields.items():
        want = (len(index), *trailing)
        if record[name].dtype.str != dtype or record[name].shape != want:
            return (f"has field {name!r} of dtype {record[name].dtype.str} and shape "
                    f"{record[name].shape} instead of {dtype} and {want}")
    return None
