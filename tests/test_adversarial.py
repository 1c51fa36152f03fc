"""Adversarial inputs and faults (issue 15): each case asserts a specific, clear error (its type
AND that the message names the argument or file) or an honest status. Sweep-store faults live in
tests/test_adversarial_sweep.py.

Validation errors happen before anything is compiled, so the file runs in seconds; only the
"honest status" cases at the end integrate (tiny) flows.
"""

import gzip
import hashlib
import io
import os
import pickle  # only to *craft* malicious files; ibflow itself never imports it
import struct
import tarfile
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow.data import (
    binary_task,
    digits,
    gaussian_mixture,
    load_cifar10,
    load_mnist,
    read_idx,
    sparse_regression,
)

KEY = jax.random.key(0)


# --- a crafted file that runs code when unpickled ---------------------------------------------
class _Payload:
    """Unpickling this calls ``os.mkdir(marker)``: the marker proves that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _evil_bytes(marker) -> bytes:
    return pickle.dumps({b"data": _Payload(marker), b"labels": [0]}, protocol=2)


def test_the_payload_really_executes_when_unpickled(tmp_path):
    # Guard for the tests below: the crafted bytes are harmful if anything unpickles them.
    marker = tmp_path / "pwned"
    pickle.loads(_evil_bytes(marker))
    assert marker.exists()


def _tar_gz(path, members: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    return np.concatenate([labels[:, None], pixels], 1).tobytes()


_TEST = "test_batch.bin"


# Each builder writes a bad data set under `root` and returns (call, exception, regex, file):
# the error must be `exception`, match `regex` and name `file`.
def _evil_bin(root):
    folder = root / "cifar-10-batches-bin"
    folder.mkdir()
    (folder / _TEST).write_bytes(_evil_bytes(root / "pwned"))
    return (lambda: load_cifar10(root, split="test"), ValueError, "serialized Python object",
            folder / _TEST)


def _evil_bin_with_sidecar(root):
    # The attack of issue 15: a sidecar .md5 that matches the crafted file must not be trusted.
    call, error, _, path = _evil_bin(root)
    path.with_name(path.name + ".md5").write_text(hashlib.md5(path.read_bytes()).hexdigest())
    return call, error, "serialized Python object", path


def _evil_python_distribution(root):
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    for name in ["test_batch", *(f"data_batch_{k}" for k in range(1, 6))]:
        (folder / name).write_bytes(_evil_bytes(root / "pwned"))
    return (lambda: load_cifar10(root, split="test"), FileNotFoundError,
            "python distribution.*never reads", root)


def _evil_member(root):
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {_TEST: _evil_bytes(root / "pwned")})
    return (lambda: load_cifar10(root, split="test", verify_checksums=False), ValueError,
            "serialized Python object", archive)


def _evil_member_checksummed(root):
    # Even a user checksum that matches the crafted archive does not make it executable.
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {_TEST: _evil_bytes(root / "pwned")})
    sums = {archive.name: hashlib.sha256(archive.read_bytes()).hexdigest()}
    return (lambda: load_cifar10(root, split="test", checksums=sums), ValueError,
            "serialized Python object", archive)


def _evil_as_idx(root):
    (root / "train-images-idx3-ubyte").write_bytes(_evil_bytes(root / "pwned"))
    (root / "train-labels-idx1-ubyte").write_bytes(_evil_bytes(root / "pwned"))
    return lambda: load_mnist(root), ValueError, "not an IDX file", root


@pytest.mark.parametrize("build", [_evil_bin, _evil_bin_with_sidecar, _evil_python_distribution,
                                   _evil_member, _evil_member_checksummed, _evil_as_idx])
def test_crafted_serialized_object_never_executes(tmp_path, build):
    call, error, match, path = build(tmp_path)
    with pytest.raises(error, match=match) as info:
        call()
    assert str(path) in str(info.value)
    assert not (tmp_path / "pwned").exists()


# --- truncated, fake and corrupt downloads ----------------------------------------------------
def _idx(array):
    array = np.asarray(array, dtype=np.uint8)
    return bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape) + \
        array.tobytes()


def _mnist_files(root, images_raw, labels_raw, compress):
    suffix = ".gz" if compress else ""
    paths = (root / f"train-images-idx3-ubyte{suffix}", root / f"train-labels-idx1-ubyte{suffix}")
    paths[0].write_bytes(images_raw)
    paths[1].write_bytes(labels_raw)
    return paths


_IMAGES = _idx(np.zeros((3, 28, 28)))
_LABELS = _idx(np.arange(3))


def _truncated_gz(root):
    raw = gzip.compress(_IMAGES)
    images, _ = _mnist_files(root, raw[: len(raw) // 2], gzip.compress(_LABELS), True)
    return lambda: load_mnist(root, verify_checksums=False), "truncated gzip", images


def _fake_gz(root):
    images, _ = _mnist_files(root, b"\x1f\x8b" + b"not gzip at all" * 8, gzip.compress(_LABELS),
                             True)
    return lambda: load_mnist(root, verify_checksums=False), "not a valid one", images


def _truncated_idx_data(root):
    images, _ = _mnist_files(root, _IMAGES[:-10], _LABELS, False)
    return lambda: load_mnist(root), "is truncated", images


def _truncated_idx_header(root):
    images, _ = _mnist_files(root, _IMAGES[:9], _LABELS, False)
    return lambda: load_mnist(root), "truncated IDX file", images


def _too_long_idx(root):
    images, _ = _mnist_files(root, _IMAGES + b"xx", _LABELS, False)
    return lambda: load_mnist(root), "too long", images


def _wrong_magic(root):
    images, _ = _mnist_files(root, b"\x01\x02" + _IMAGES[2:], _LABELS, False)
    return lambda: load_mnist(root), "bad magic", images


def _wrong_type_code(root):
    images, _ = _mnist_files(root, _IMAGES[:2] + b"\x42" + _IMAGES[3:], _LABELS, False)
    return lambda: load_mnist(root), "bad magic", images


def _empty_idx(root):
    images, _ = _mnist_files(root, b"", _LABELS, False)
    return lambda: load_mnist(root), "not an IDX file", images


def _gz_of_garbage(root):
    images, _ = _mnist_files(root, gzip.compress(b"\x00\x00\x08"), gzip.compress(_LABELS), True)
    return lambda: load_mnist(root, verify_checksums=False), "not an IDX file", images


def _mnist_count_mismatch(root):
    _mnist_files(root, _IMAGES, _idx(np.arange(5)), False)
    return lambda: load_mnist(root), "expected uint8 of shape \\(3,\\) to match the images", root


def _mnist_published_md5(root):
    images, _ = _mnist_files(root, gzip.compress(_IMAGES), gzip.compress(_LABELS), True)
    return lambda: load_mnist(root), "checksum mismatch", images


def _mnist_sidecar_ignored(root):
    images, labels = _mnist_files(root, gzip.compress(_IMAGES), gzip.compress(_LABELS), True)
    for p in (images, labels):
        p.with_name(p.name + ".md5").write_text(hashlib.md5(p.read_bytes()).hexdigest())
    return lambda: load_mnist(root), "checksum mismatch.*published", images


def _mnist_user_checksum(root):
    images, _ = _mnist_files(root, _IMAGES, _LABELS, False)
    return (lambda: load_mnist(root, checksums={images.name: "ab" * 32}), "checksum mismatch",
            images)


def _malformed_checksum(root):
    images, _ = _mnist_files(root, _IMAGES, _LABELS, False)
    return (lambda: load_mnist(root, checksums={images.name: "xyz"}),
            r"checksums\['train-images-idx3-ubyte'\]", "train-images-idx3-ubyte")


def _read_idx_missing(root):
    return lambda: read_idx(root / "nope.idx"), "No such file", root / "nope.idx"


def _mnist_missing(root):
    _mnist_files(root, _IMAGES, _LABELS, False)
    return lambda: load_mnist(root, split="test"), "files not found", root


def _cifar_truncated_record(root):
    folder = root / "cifar-10-batches-bin"
    folder.mkdir()
    (folder / _TEST).write_bytes(_records(2)[:-7])
    return lambda: load_cifar10(root, split="test"), "truncated", folder / _TEST


def _cifar_empty(root):
    (root / _TEST).write_bytes(b"")
    return lambda: load_cifar10(root, split="test"), "is empty", root / _TEST


def _cifar_bad_label(root):
    raw = bytearray(_records(3))
    raw[2 * 3073] = 200
    (root / _TEST).write_bytes(bytes(raw))
    return lambda: load_cifar10(root, split="test"), "record 2 has label 200", root / _TEST


def _cifar_gzipped_batch(root):
    (root / _TEST).write_bytes(gzip.compress(_records(2)))
    return lambda: load_cifar10(root, split="test"), "gzip-compressed", root / _TEST


def _cifar_user_checksum(root):
    (root / _TEST).write_bytes(_records(2))
    return (lambda: load_cifar10(root, split="test", checksums={_TEST: "0" * 32}),
            "checksum mismatch", root / _TEST)


def _cifar_missing(root):
    (root / _TEST).write_bytes(_records(2))
    return lambda: load_cifar10(root, split="train"), "files not found", root


def _archive_truncated(root):
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {_TEST: _records(40)})
    archive.write_bytes(archive.read_bytes()[:2000])
    return (lambda: load_cifar10(root, split="test", verify_checksums=False),
            "truncated or not a valid", archive)


def _archive_fake_gzip(root):
    archive = root / "cifar-10-binary.tar.gz"
    archive.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    return (lambda: load_cifar10(root, split="test", verify_checksums=False),
            "truncated or not a valid", archive)


def _archive_not_gzip(root):
    archive = root / "cifar-10-binary.tar.gz"
    archive.write_bytes(b"<html>404 not found</html>")
    return (lambda: load_cifar10(root, split="test", verify_checksums=False),
            "truncated or not a valid", archive)


def _archive_missing_member(root):
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {"data_batch_1.bin": _records(1)})
    return (lambda: load_cifar10(root, split="test", verify_checksums=False),
            "has no member cifar-10-batches-bin/test_batch.bin", archive)


def _archive_published_md5(root):
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {_TEST: _records(1)})
    return (lambda: load_cifar10(root, split="test"),
            "checksum mismatch.*c32a1d4ab5d03f1284b67883e8d87530.*published", archive)


def _archive_truncated_member(root):
    archive = root / "cifar-10-binary.tar.gz"
    _tar_gz(archive, {_TEST: _records(2)[:5000]})
    return (lambda: load_cifar10(root, split="test", verify_checksums=False), "truncated",
            f"{archive}:cifar-10-batches-bin/{_TEST}")


@pytest.mark.parametrize("build", [
    _truncated_gz, _fake_gz, _truncated_idx_data, _truncated_idx_header, _too_long_idx,
    _wrong_magic, _wrong_type_code, _empty_idx, _gz_of_garbage, _mnist_count_mismatch,
    _mnist_published_md5, _mnist_sidecar_ignored, _mnist_user_checksum, _malformed_checksum,
    _mnist_missing, _cifar_truncated_record, _cifar_empty, _cifar_bad_label,
    _cifar_gzipped_batch, _cifar_user_checksum, _cifar_missing, _archive_truncated,
    _archive_fake_gzip, _archive_not_gzip, _archive_missing_member, _archive_published_md5,
    _archive_truncated_member,
])
def test_bad_file_is_refused_by_name(tmp_path, build):
    call, match, path = build(tmp_path)
    with pytest.raises((ValueError, FileNotFoundError), match=match) as info:
        call()
    assert str(path) in str(info.value)


def test_missing_file_is_file_not_found(tmp_path):
    build = _read_idx_missing
    call, match, path = build(tmp_path)
    with pytest.raises(FileNotFoundError, match=match) as info:
        call()
    assert str(path) in str(info.value)


@pytest.mark.parametrize("call", [lambda: load_mnist(".", split="val"),
                                  lambda: load_cifar10(".", split="validation")])
def test_bad_split(call):
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        call()


# --- bad arguments at public entry points -----------------------------------------------------
X5 = np.asarray(jax.random.normal(jax.random.key(1), (3, 5)))
Y3 = X5 @ np.array([1.0, 0, 0, 0, 0.5])
YC = np.sign(Y3)  # ±1 labels for the classifiers
Q5 = ibflow.DiagonalNetRegularizer.from_scale_shape(0.1, dim=5)


def _diag(**kw):
    return lambda: ibflow.DiagonalNet.from_scale_shape(**{"scale": 0.1, "dim": 4, **kw})


def _fc(**kw):
    return lambda: ibflow.FullyConnectedNet.from_scale_shape(
        **{"scale": 0.1, "dim": 4, "key": KEY, **kw})


def _leaky(**kw):
    return lambda: ibflow.LeakyReLUNeuron.from_scale_shape(
        **{"scale": 0.1, "dim": 4, "key": KEY, **kw})


def _shallow(**kw):
    return lambda: ibflow.ShallowNet.init(**{"width": 4, "key": KEY, **kw})


def _classifier(**kw):
    return lambda: ibflow.TwoLayerClassifier.init(**{"dim": 4, "width": 4, "key": KEY, **kw})


def _regression(**kw):
    return lambda: sparse_regression(KEY, **{"n": 3, "d": 6, "k": 2, "n_test": 2, **kw})


def _mixture(**kw):
    return lambda: gaussian_mixture(KEY, **{"n": 3, "d": 6, "n_test": 2, **kw})


def _minimize(Q=Q5, X=X5, y=Y3, **kw):
    return lambda: ibflow.minimize_regularizer(Q, X, y, **kw)


def _sgd():
    import optax

    return optax.sgd(0.1)


_IMG = np.arange(40, dtype=np.uint8).reshape(10, 2, 2)
_LAB = np.array([0, 1] * 5)

REFUSED = [
    # models: DiagonalNet
    (_diag(dim=0), "dim must be an integer >= 1"),
    (_diag(dim=-1), "dim must be an integer >= 1"),
    (_diag(dim=2.5), "dim must be an integer >= 1"),
    (_diag(dim=True), "dim must be an integer >= 1"),
    (_diag(scale=np.inf), "scale alpha must be > 0 and finite"),
    (_diag(scale=-np.inf), "scale alpha must be > 0"),
    (_diag(scale=np.nan), "scale alpha must be > 0"),
    (_diag(scale=0.0), "scale alpha must be > 0"),
    (_diag(scale=1e-3 + 1e-3j), "scale alpha is complex"),
    (_diag(scale=np.array([])), "scale alpha is empty"),
    (_diag(scale="big"), "scale alpha must be a real numeric array"),
    (_diag(scale=np.array([0.1, np.inf, 0.1, 0.1])), "scale alpha must be > 0 and finite"),
    (_diag(shape=1.0), "shape s must lie in the open interval"),
    (_diag(shape=-1.0), "shape s must lie in the open interval"),
    (_diag(shape=np.nan), "shape s must lie in the open interval"),
    (_diag(shape=np.inf), "shape s must lie in the open interval"),
    (_diag(shape=0.5j), "shape s is complex"),
    (_diag(scale=np.ones(3), dim=4), "vectors of length dim"),
    (lambda: ibflow.DiagonalNet.from_scale_shape(0.1), "pass dim=d"),
    (lambda: ibflow.DiagonalNet(jnp.ones(3), jnp.ones(3), jnp.ones(3), jnp.ones(4)),
     "four vectors of one shape"),
    # FullyConnectedNet
    (_fc(width=0), "width must be an integer >= 1"),
    (_fc(width=2.0), "width must be an integer >= 1"),
    (_fc(dim=0), "dim must be an integer >= 1"),
    (_fc(scale=np.inf), "scale alpha must be > 0 and finite"),
    (_fc(scale=np.nan), "scale alpha must be > 0"),
    (_fc(shape=2.0), "shape s must lie"),
    (_fc(width=3, symmetric=True), "symmetric=True needs an even width"),
    (_fc(width=2, scale=np.ones(3) * 0.1), "vectors of length width=2"),
    (lambda: ibflow.FullyConnectedNet(first=jnp.ones((2, 3)), second=jnp.ones(3)),
     "first of shape \\(k, d\\)"),
    # LeakyReLUNeuron
    (_leaky(slope=0.0), "slope gamma must lie in \\(0.0, 1.0\\]"),
    (_leaky(slope=1.5), "slope gamma must lie"),
    (_leaky(slope=np.nan), "slope gamma must lie"),
    (_leaky(dim=0), "dim must be an integer >= 1"),
    (_leaky(scale=np.inf), "scale alpha must be > 0 and finite"),
    (_leaky(scale=np.array([0.1, 0.2])), "scalar scale and shape"),
    (lambda: ibflow.LeakyReLUNeuron(a=jnp.ones(2), w=jnp.ones(3), slope=jnp.array(0.5)),
     "scalar a, vector w"),
    # ShallowNet and bias distributions
    (_shallow(width=0), "width must be an integer >= 1"),
    (_shallow(activation="tanh"), "activation must be 'relu' or 'abs'"),
    (_shallow(bias="uniform"), "bias must be UniformBias"),
    (_shallow(output_std=-1.0), "output_std must be >= 0"),
    (_shallow(output_std=np.nan), "output_std contains non-finite"),
    (_shallow(output_std=np.inf), "output_std contains non-finite"),
    (_shallow(output_bias_std=-0.5), "output_bias_std must be >= 0"),
    (lambda: ibflow.UniformBias(np.inf), "UniformBias half_width must be > 0 and finite"),
    (lambda: ibflow.UniformBias(0.0), "UniformBias half_width must be > 0"),
    (lambda: ibflow.GaussianBias(np.nan), "GaussianBias std must be > 0"),
    # TwoLayerClassifier
    (_classifier(width=0), "width must be an integer >= 1"),
    (_classifier(dim=-2), "dim must be an integer >= 1"),
    (_classifier(init_std=-1.0), "init_std must be >= 0"),
    (_classifier(init_std=np.inf), "init_std contains non-finite"),
    (_classifier(slope=2.0), "slope gamma must lie in \\[0, 1\\]"),
    (_classifier(second_scale="cube"), "second_scale must be 'sqrt'"),
    (_classifier(width=3), "balanced=True needs an even width"),
    # data generators
    (_regression(noise=np.inf), "noise \\(a standard deviation\\) contains non-finite"),
    (_regression(noise=np.nan), "noise \\(a standard deviation\\) contains non-finite"),
    (_regression(noise=-0.1), "noise \\(a standard deviation\\) must be >= 0"),
    (_regression(noise=0.1j), "noise \\(a standard deviation\\) is complex"),
    (_regression(n=0), "n must be an integer >= 1"),
    (_regression(d=-1), "d must be an integer >= 1"),
    (_regression(k=7), "sparsity k=7 exceeds the dimension d=6"),
    (_regression(k=0), "k must be an integer >= 1"),
    (_regression(n_test=0), "n_test must be an integer >= 1"),
    (_regression(n=2.0), "n must be an integer >= 1"),
    (_mixture(n=0), "n must be an integer >= 1"),
    (_mixture(d=0), "d must be an integer >= 1"),
    (_mixture(n_test=-1), "n_test must be an integer >= 0"),
    (_mixture(sigma_p=np.inf), "sigma_p contains non-finite"),
    (_mixture(sigma_p=-1.0), "sigma_p must be >= 0"),
    (_mixture(sigma_e=0.0), "sigma_e must be > 0"),
    (_mixture(sigma_e=np.nan), "sigma_e contains non-finite"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=1, scale=0.0), "scale must be > 0"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=1, scale=np.inf),
     "scale contains non-finite"),
    (lambda: binary_task(_IMG * np.nan, _LAB, positive=0, negative=1),
     "images contains non-finite"),
    (lambda: binary_task(_IMG + 0j, _LAB, positive=0, negative=1), "images must be"),
    (lambda: binary_task(_IMG, _LAB[:4], positive=0, negative=1), "labels must have shape"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=1, n_test=-1),
     "n_test must be an integer >= 0"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=1, n=0), "n must be an integer >= 1"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=0), "overlap"),
    (lambda: binary_task(_IMG, _LAB, positive=0, negative=1, n=20), "asked for n=20"),
    (lambda: digits(task="3-vs-5"), "task must be 'parity' or '0-vs-1'"),
    # minimize_regularizer
    (_minimize(y=Y3[:2]), "X and y disagree on the number of examples"),
    (_minimize(Q=ibflow.DiagonalNetRegularizer.from_scale_shape(0.1, dim=8)),
     "built for dimension 8 but X has d = 5"),
    (_minimize(X=X5 + 0j), "X is complex"),
    (_minimize(y=Y3 + 1j), "y is complex"),
    (_minimize(y=np.where(np.arange(3) == 0, np.nan, Y3)), "y contains non-finite"),
    (_minimize(X=np.where(np.arange(5) == 1, np.inf, X5)), "X contains non-finite"),
    (_minimize(X=np.zeros((0, 5)), y=np.zeros(0)), "empty"),
    (_minimize(X=X5[0]), "X must be a 2-d array"),
    (_minimize(y=Y3[:, None]), "y must be a 1-d array"),
    (_minimize(X=np.ones((6, 5)), y=np.ones(6)), "needs n <= d"),
    (_minimize(X=np.stack([X5[0], X5[0], X5[1]]), y=np.ones(3)), "rank 2 < n = 3"),
    (_minimize(Q="l1"), "Q must be an ibflow regularizer"),
    (_minimize(rtol=1e-300), "rtol must be >= 8.9e-16"),
    (_minimize(rtol=np.nan), "rtol contains non-finite"),
    (_minimize(max_steps=0), "max_steps must be an integer >= 1"),
    (_minimize(X=np.array([["a"] * 5] * 3)), "X must be a real numeric array"),
    (_minimize(Q=ibflow.L1Norm(), X=X5 + 1j), "X is complex"),
    # interpolants
    (lambda: ibflow.min_l2_interpolant(X5 + 0j, Y3), "X is complex"),
    (lambda: ibflow.min_l2_interpolant(X5, np.full(3, np.nan)), "y contains non-finite"),
    (lambda: ibflow.min_l2_interpolant(np.ones((6, 5)), np.ones(6)),
     "min_l2_interpolant needs n <= d"),
    (lambda: ibflow.min_l2_interpolant(X5, Y3[:2]), "disagree on the number of examples"),
    (lambda: ibflow.min_l1_interpolant(X5, np.full(3, np.inf)), "y contains non-finite"),
    (lambda: ibflow.min_l1_interpolant(X5 + 0j, Y3), "X is complex"),
    (lambda: ibflow.min_l1_interpolant(np.vstack([X5, X5[:1]]), np.r_[Y3, Y3[0] + 1]),
     "min_l1_interpolant: no w solves Xw = y"),
    # implicit_bias
    (lambda: ibflow.implicit_bias("diagonal"), "model must be an ibflow model"),
    (lambda: ibflow.implicit_bias(ibflow.DiagonalNet(*(jnp.full(3, np.nan),) * 4)),
     "model \\(DiagonalNet\\) parameters contains non-finite"),
    (lambda: ibflow.implicit_bias(_fc(width=2)()), "width 2 > 1"),
    (lambda: ibflow.implicit_bias(_leaky()(), final_sign=0.5), "final_sign must be \\+1 or -1"),
    (lambda: ibflow.implicit_bias(_diag()(), final_sign=1.0), "final_sign applies only"),
    (lambda: ibflow.implicit_bias(_leaky(shape=-0.5)()), "final_sign=sign"),
    # variational solvers
    (lambda: ibflow.relu_variational(np.array([0.1, 0.5]) + 0j, np.ones(2)), "x is complex"),
    (lambda: ibflow.relu_variational(np.array([0.1, 0.5]), np.array([1.0, np.nan])),
     "h contains non-finite"),
    (lambda: ibflow.relu_variational(np.array([]), np.array([])), "x is empty"),
    (lambda: ibflow.relu_variational(np.array([0.1, 0.5]), np.ones(3)), "x must have shape"),
    (lambda: ibflow.relu_variational(np.array([0.1, 0.5]), np.ones(2), num_grid=4),
     "num_grid must be an integer >= 8"),
    (lambda: ibflow.relu_variational(np.array([0.1, 0.5]), np.ones(2), bias=2.0),
     "bias must be an AbstractBiasDistribution"),
    (lambda: ibflow.abs_variational(np.array([0.1]), np.ones(1), potential="quartic"),
     "potential must be an ibflow potential"),
    (lambda: ibflow.abs_variational(np.array([0.1]), np.ones(1),
                                    potential=ibflow.QuarticPotential(), max_iter=0),
     "max_iter must be an integer >= 1"),
    (lambda: ibflow.abs_variational(np.array([0.1]), np.ones(1),
                                    potential=ibflow.QuarticPotential(), tol=-1.0),
     "tol must be > 0"),
    (lambda: ibflow.abs_variational(np.array([np.inf]), np.ones(1),
                                    potential=ibflow.QuarticPotential()),
     "x contains non-finite"),
    # integrate: data and model (all refused before compiling)
    (lambda: ibflow.integrate(_diag(dim=5)(), X5 + 0j, Y3), "X is complex"),
    (lambda: ibflow.integrate(_diag(dim=5)(), X5, Y3 * np.nan), "y contains non-finite"),
    (lambda: ibflow.integrate(_diag(dim=5)(), np.zeros((0, 5)), np.zeros(0)), "empty"),
    (lambda: ibflow.integrate(_diag(dim=5)(), X5, Y3[:2]), "disagree on the number"),
    (lambda: ibflow.integrate(_diag(dim=4)(), X5, Y3), "input dimension 4 but X has 5"),
    (lambda: ibflow.integrate(_diag(dim=5)(), X5.astype(str), Y3),
     "X must be a real numeric array"),
    # classification, discrete descent, NTK, diagnostics, differentiable limits
    (lambda: ibflow.gradient_descent(_classifier(dim=5)(), X5 + 0j, YC), "X is complex"),
    (lambda: ibflow.gradient_descent(_classifier(dim=5)(), X5, YC * np.nan),
     "y contains non-finite"),
    (lambda: ibflow.gradient_descent(_classifier(dim=5)(), X5, YC, learning_rate=-1.0),
     "learning_rate must be > 0"),
    (lambda: ibflow.gradient_descent(_classifier(dim=5)(), X5, YC, num_steps=0),
     "num_steps must be an integer >= 1"),
    (lambda: ibflow.classification_flow(_classifier(dim=5)(), X5[:0], YC[:0]),
     "the data set is empty"),
    (lambda: ibflow.classification_flow(_classifier(dim=5)(), X5, YC, target_loss=-1.0),
     "target_loss must be > 0"),
    (lambda: ibflow.classification_flow(_classifier(dim=5)(), X5, YC, flow="wall"),
     "flow must be an ibflow flow"),
    (lambda: ibflow.normalized_margins(_classifier(dim=5)(), X5 + 0j, YC), "X is complex"),
    (lambda: ibflow.kkt_residual(_classifier(dim=5)(), X5, YC * np.inf),
     "y contains non-finite"),
    (lambda: ibflow.stable_rank(np.ones(3)), "W must be a 2-d array"),
    (lambda: ibflow.stable_rank(np.ones((3, 3)) + 0j), "W is complex"),
    (lambda: ibflow.data.near_orthogonality(X5[:1]), "n >= 2"),
    (lambda: ibflow.data.near_orthogonality(X5 + 1j), "X is complex"),
    (lambda: ibflow.descend(_diag(dim=5)(), X5 + 0j, Y3, optimizer=_sgd(), num_steps=3),
     "X is complex"),
    (lambda: ibflow.descend(_diag(dim=5)(), X5, Y3, optimizer=_sgd(), num_steps=0),
     "num_steps must be an integer >= 1"),
    (lambda: ibflow.mirror_descent(ibflow.QuarticPotential(), learning_rate=-1.0),
     "learning_rate must be > 0"),
    (lambda: ibflow.mirror_descent(ibflow.QuarticPotential(), learning_rate=np.nan),
     "learning_rate contains non-finite"),
    (lambda: ibflow.mirror_descent("quartic", learning_rate=0.1), "needs an ibflow potential"),
    (lambda: ibflow.tangent_kernel(_diag(dim=5)(), X5 + 0j), "X is complex"),
    (lambda: ibflow.ntk_predictor(_diag(dim=5)(), X5, Y3[:2]), "disagree on the number"),
    (lambda: ibflow.limit_point(_diag(dim=5)(), X5, Y3, route="magic"),
     "route must be 'implicit' or 'solve'"),
    (lambda: ibflow.limit_point(_diag(dim=5)(), X5 + 0j, Y3), "X is complex"),
    (lambda: ibflow.differentiable_minimize(Q5, X5 + 0j, Y3), "X is complex"),
    (lambda: ibflow.WeightedL2Norm(weights=-jnp.ones(3), center=jnp.zeros(3)),
     "WeightedL2Norm weights must be > 0"),
    (lambda: ibflow.WeightedL2Norm(weights=jnp.ones(3), center=jnp.full(3, jnp.nan)),
     "WeightedL2Norm center contains non-finite"),
    (lambda: ibflow.MirrorFlow(potential="x"), "MirrorFlow needs an ibflow potential"),
    (lambda: ibflow.PolynomialPotential(np.array([np.nan, 1.0])),
     "PolynomialPotential quadratic coefficient must be > 0"),
]


@pytest.mark.parametrize("call, match", REFUSED, ids=[f"{i:03d}" for i in range(len(REFUSED))])
def test_bad_argument_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_integer_data_are_converted_to_float():
    # The one documented convention: integer (and boolean) arrays become float64.
    Xi = np.array([[1, 0, 2, 0, 1], [0, 1, 0, 3, 1], [2, 1, 1, 0, 0]])
    yi = np.array([1, 2, 3])
    for a, b in [(ibflow.min_l2_interpolant(Xi, yi),
                  ibflow.min_l2_interpolant(Xi.astype(float), yi.astype(float))),
                 (ibflow.minimize_regularizer(Q5, Xi, yi).w,
                  ibflow.minimize_regularizer(Q5, Xi.astype(float), yi.astype(float)).w)]:
        assert a.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # And the interpolation constraint holds, checked independently in numpy.
    np.testing.assert_allclose(Xi @ np.asarray(ibflow.min_l2_interpolant(Xi, yi)), yi, rtol=1e-12)
    alpha = ibflow.DiagonalNet.from_scale_shape(np.array([1, 2, 3]), 0).u_plus
    np.testing.assert_allclose(np.asarray(alpha), np.sqrt([1.0, 2.0, 3.0]), rtol=1e-15)


def test_traced_non_finite_data_error_at_run_time():
    f = jax.jit(lambda X, y: ibflow.min_l2_interpolant(X, y))
    with pytest.raises(Exception, match="y contains non-finite"):
        f(jnp.asarray(X5), jnp.asarray(Y3).at[0].set(jnp.nan))


# --- honest statuses --------------------------------------------------------------------------
def _exact_loss(X, y, w) -> Fraction:
    """½ mean((Xw − y)²) in exact rational arithmetic from the float64 inputs."""
    X, y, w = (np.asarray(a, dtype=np.float64) for a in (X, y, w))
    total = Fraction(0)
    for i in range(X.shape[0]):
        r = sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(X[i], w)), Fraction(0))
        total += (r - Fraction(float(y[i]))) ** 2
    return total / (2 * X.shape[0])


def _exact_roundoff(model, fields):
    """ε·sqrt(Σ_j (∂w/∂θ_j θ_j)²) from the full Jacobian (the estimator uses random JVPs)."""
    J = jax.jacfwd(lambda m: m.predictor())(model)
    total = 0.0
    for f in fields:
        Jf, theta = np.asarray(getattr(J, f)), np.asarray(getattr(model, f))
        total = total + np.sum((Jf * theta[None]) ** 2, axis=tuple(range(1, Jf.ndim)))
    return np.finfo(float).eps * np.sqrt(total)


@pytest.mark.parametrize("scale", [1e-3, 1e30])
def test_predictor_roundoff_matches_the_jacobian(scale):
    from ibflow._checks import predictor_roundoff, square_loss_floor

    models = [(ibflow.DiagonalNet.from_scale_shape(scale, 0.3, dim=5),
               ["u_plus", "v_plus", "u_minus", "v_minus"]),
              (_fc(scale=scale, width=2, symmetric=True, dim=5)(), ["first", "second"])]
    for model, fields in models:
        ratio = np.asarray(predictor_roundoff(model)) / _exact_roundoff(model, fields)
        assert np.all((ratio > 0.3) & (ratio < 3)), ratio
        floor = float(square_loss_floor(model, X5))
        # Terms of size α cancel: at α = 1e30 the floor is astronomically above any target.
        assert (floor > 1e20) if scale > 1 else (floor < 1e-30)


@pytest.fixture(scope="module")
def huge_scale_solution():
    X = jnp.asarray(X5)
    y = jnp.asarray(Y3)
    model = ibflow.DiagonalNet.from_scale_shape(1e30, 0.0, dim=5)
    return X, y, ibflow.integrate(model, X, y, throw=False, max_steps=2000)


def test_huge_scale_loss_is_honest(huge_scale_solution):
    # α = 1e30: u₊v₊ − u₋v₋ cancels catastrophically. Either the reported loss is the loss of the
    # reported predictor (recomputed exactly) or the status does not claim convergence.
    X, y, sol = huge_scale_solution
    exact = _exact_loss(X, y, sol.predictor)
    reported = Fraction(float(sol.loss))
    agrees = abs(reported - exact) <= Fraction(1, 10**6) * abs(exact)
    assert agrees or not bool(sol.converged)


def test_huge_scale_loss_matches_predictor_whatever_the_status(huge_scale_solution):
    # Stronger: the loss field describes the predictor field even when not converged.
    X, y, sol = huge_scale_solution
    exact = _exact_loss(X, y, sol.predictor)
    assert abs(Fraction(float(sol.loss)) - exact) <= Fraction(1, 10**6) * abs(exact)


def test_time_budget_is_not_converged():
    # A time budget excludes the Newton tail (its limit lies at t = ∞): the path is integrated.
    model = ibflow.DiagonalNet.from_scale_shape(0.1, dim=5)
    sol = ibflow.integrate(model, X5, Y3, t_max=1e-3, max_steps=2000, throw=False)
    assert sol.status == ibflow.Status.budget_exhausted and not bool(sol.converged)
    assert float(sol.time) <= 1e-3 and float(sol.loss) > float(sol.target_loss)


def test_non_finite_initial_model_is_not_converged():
    model = ibflow.DiagonalNet(*(jnp.full(5, jnp.nan),) * 4)
    sol = ibflow.integrate(model, X5, Y3, max_steps=2000, throw=False)
    assert sol.status == ibflow.Status.nonfinite and not bool(sol.converged)


@pytest.mark.parametrize("scale", [0.1, 1e-30])
@pytest.mark.parametrize("rtol", [1e-12, 1e-15])
def test_minimizer_status_is_honest(scale, rtol):
    # Whatever the status, the reported feasibility is the true residual, and "converged"
    # means every equation holds to rtol times its roundoff scale (recomputed in numpy).
    Q = ibflow.DiagonalNetRegularizer.from_scale_shape(scale, dim=5)
    m = ibflow.minimize_regularizer(Q, X5, Y3, rtol=rtol, throw=False)
    w = np.asarray(m.w)
    r = X5 @ w - Y3
    np.testing.assert_allclose(float(m.feasibility), np.linalg.norm(r), rtol=1e-6, atol=1e-15)
    if bool(m.converged):
        assert np.all(np.abs(r) <= rtol * (np.abs(X5) @ np.abs(w) + np.abs(Y3)))
