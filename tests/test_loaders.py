"""Local-file loaders (MNIST IDX, CIFAR-10 binary batches), checksums, digits, binary tasks.
The tests write tiny files in the real formats; nothing is downloaded."""

import gzip
import hashlib
import io
import struct
import tarfile

import numpy as np
import pytest

import ibflow
from ibflow.data import (
    binary_task,
    digits,
    gaussian_mixture,
    load_cifar10,
    load_mnist,
    near_orthogonality,
    read_idx,
)


def _idx_bytes(array: np.ndarray) -> bytes:
    # Magic: 0x00 0x00, type 0x08 (uint8), ndim; then big-endian int32 sizes (LeCun's format).
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(root, n=6, compress=True, split_stems=("train-images-idx3-ubyte",
                                                        "train-labels-idx1-ubyte")):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    paths = []
    for stem, arr in zip(split_stems, (images, labels), strict=True):
        data = _idx_bytes(arr)
        path = root / (stem + (".gz" if compress else ""))
        path.write_bytes(gzip.compress(data) if compress else data)
        paths.append(path)
    return images, labels, paths


def test_mnist_idx_roundtrip_gz_and_raw(tmp_path):
    images, labels, paths = _write_mnist(tmp_path, compress=False)
    got_x, got_y = load_mnist(tmp_path)  # uncompressed files: no published digest, unchecked
    np.testing.assert_array_equal(got_x, images)
    np.testing.assert_array_equal(got_y, labels)
    gz = tmp_path / "gz"
    gz.mkdir()
    images, labels, paths = _write_mnist(gz, compress=True)
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    got_x, got_y = load_mnist(gz, checksums=sums)
    np.testing.assert_array_equal(got_x, images)
    np.testing.assert_array_equal(got_y, labels)
    # Same name as the official files, different content: the published md5 rejects it.
    with pytest.raises(ValueError, match="checksum mismatch.*train-images-idx3-ubyte.gz"):
        load_mnist(gz)
    np.testing.assert_array_equal(load_mnist(gz, verify_checksums=False)[1], labels)
    # A sidecar file next to the data is not trusted: the published md5 still rejects it.
    for p in paths:
        p.with_name(p.name + ".md5").write_text(hashlib.md5(p.read_bytes()).hexdigest() + "  "
                                                + p.name)
    with pytest.raises(ValueError, match="checksum mismatch.*train-images-idx3-ubyte.gz"):
        load_mnist(gz)


def test_mnist_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path, split="test")
    message = str(info.value)
    assert str(tmp_path) in message
    assert "t10k-images-idx3-ubyte[.gz]" in message and "t10k-labels-idx1-ubyte[.gz]" in message
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + struct.pack(">i", 3) + b"abc")
    with pytest.raises(ValueError, match="magic"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">i", 5) + b"ab")
    with pytest.raises(ValueError, match="holds 2 bytes"):
        read_idx(short)
    _, _, paths = _write_mnist(tmp_path, compress=True)
    with pytest.raises(ValueError, match="mismatch"):
        load_mnist(tmp_path, checksums={paths[0].name: "0" * 64})
    with pytest.raises(ValueError, match="split"):
        load_mnist(tmp_path, split="val")


def _cifar_records(n, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    raw = np.concatenate([labels[:, None], data], axis=1).tobytes()
    return raw, data, labels


def _write_cifar(folder, names, n=4):
    out = {}
    for seed, name in enumerate(names):
        raw, data, labels = _cifar_records(n, seed)
        (folder / name).write_bytes(raw)
        out[name] = (data, labels)
    return out


def _write_cifar_archive(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_cifar_binary_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    written = _write_cifar(folder, ["test_batch.bin"])
    sums = {"test_batch.bin": hashlib.md5((folder / "test_batch.bin").read_bytes()).hexdigest()}
    images, labels = load_cifar10(tmp_path, split="test", checksums=sums)  # parent folder works
    data, lab = written["test_batch.bin"]
    assert images.shape == (4, 32, 32, 3) and images.dtype == np.uint8
    np.testing.assert_array_equal(labels, lab)
    # Channel-major records: red plane first; pixel (r, c) of channel k is data[1024k + 32r + c].
    for k, (r, c) in enumerate([(0, 0), (5, 7), (31, 30)]):
        np.testing.assert_array_equal(images[:, r, c, k], data[:, 1024 * k + 32 * r + c])
    with pytest.raises(ValueError, match="checksum mismatch.*test_batch.bin"):
        load_cifar10(folder, split="test", checksums={"test_batch.bin": "0" * 32})
    with pytest.raises(FileNotFoundError) as info:
        load_cifar10(folder, split="train")
    assert str(folder) in str(info.value) and "data_batch_1.bin" in str(info.value)
    _write_cifar(folder, [f"data_batch_{k}.bin" for k in range(1, 6)])
    images, labels = load_cifar10(folder)
    assert images.shape == (20, 32, 32, 3) and labels.shape == (20,)


def test_cifar_archive(tmp_path):
    members = {f"data_batch_{k}.bin": _cifar_records(3, k)[0] for k in range(1, 6)}
    members["test_batch.bin"], data, labels = _cifar_records(2, 9)
    archive = tmp_path / "cifar-10-binary.tar.gz"
    _write_cifar_archive(archive, members)
    # Not the published archive: its md5 rejects it; a user digest or no check reads it.
    with pytest.raises(ValueError, match="checksum mismatch.*cifar-10-binary.tar.gz"):
        load_cifar10(tmp_path)
    sums = {archive.name: hashlib.sha256(archive.read_bytes()).hexdigest()}
    images, got = load_cifar10(tmp_path, split="test", checksums=sums)
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(images[:, 3, 4, 2], data[:, 2048 + 32 * 3 + 4])
    assert load_cifar10(tmp_path, verify_checksums=False)[0].shape == (15, 32, 32, 3)


def test_official_tables_are_md5_digests():
    for table in (ibflow.data.MNIST_MD5, ibflow.data.CIFAR10_MD5):
        assert all(len(v) == 32 and int(v, 16) >= 0 for v in table.values())
    # The digest published on the CIFAR-10 page for the binary distribution.
    assert ibflow.data.CIFAR10_MD5 == {
        "cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"}


def test_binary_task_and_digits():
    images = np.arange(10 * 4).reshape(10, 2, 2).astype(np.uint8)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    task = binary_task(images, labels, positive=0, negative=(1,), n=4, n_test=2, seed=3)
    assert task.X.shape == (4, 4) and task.X_test.shape == (2, 4)
    assert float(task.y.sum()) == 0.0  # balanced
    # Each row is one of the selected images / 255 with the matching label.
    for x, y in zip(np.asarray(task.X), np.asarray(task.y), strict=True):
        idx = int(round(x[0] * 255)) // 4
        assert labels[idx] == (0 if y > 0 else 1)
        np.testing.assert_allclose(x * 255, images[idx].ravel())
    with pytest.raises(ValueError, match="overlap"):
        binary_task(images, labels, positive=0, negative=(0, 1))
    d = digits(n=50, n_test=20)
    assert d.X.shape == (50, 64) and float(d.X.min()) >= 0 and float(d.X.max()) <= 1
    assert set(np.unique(np.asarray(d.y))) == {-1.0, 1.0}
    # Digits are far from orthogonal; the seed mixture is close to it (docs/theory §4.1).
    assert float(near_orthogonality(d.X)) > 10
    import jax

    mix = gaussian_mixture(jax.random.key(0))
    assert mix.X.shape == (10, 784) and float(near_orthogonality(mix.X)) < 2
    noise = np.asarray(mix.X - mix.y[:, None] * mix.mean)
    assert abs(noise.std() - 1.0) < 0.02 and abs(float(np.linalg.norm(mix.mean)) - 0.28) < 0.05


# --- loaders validate dtype, shape, label range and decompressed size (issue "Results that
# cannot be silently wrong", item 10) -----------------------------------------------------------

def _idx_typed(array: np.ndarray, code: int, dtype: str) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.astype(dtype).tobytes()


@pytest.mark.parametrize("images, labels, match", [
    (_idx_typed(np.full((2, 28, 28), np.nan), 0x0D, ">f4"), None, ">f4 images"),
    (_idx_typed(np.zeros((2, 28, 28, 3)), 0x08, "u1"), None, "shape"),
    (_idx_typed(np.zeros((2, 5, 7)), 0x08, "u1"), None, "shape"),
    (None, _idx_typed(np.array([1, 200]), 0x08, "u1"), "label 200"),
    (None, _idx_typed(np.array([1, 2]), 0x0C, ">i4"), "labels"),
    (None, _idx_typed(np.array([[1, 2]]), 0x08, "u1"), "labels"),
])
def test_mnist_refuses_wrong_dtype_shape_and_labels(tmp_path, images, labels, match):
    _write_mnist(tmp_path, n=2, compress=False)
    if images is not None:
        (tmp_path / "train-images-idx3-ubyte").write_bytes(images)
    if labels is not None:
        (tmp_path / "train-labels-idx1-ubyte").write_bytes(labels)
    with pytest.raises(ValueError, match=match):
        load_mnist(tmp_path)


@pytest.mark.parametrize("checksums", ["abc", ["abc"], {"a": 1}, {1: "x"}])
def test_checksums_of_the_wrong_type_are_named(tmp_path, checksums):
    _write_mnist(tmp_path, n=2)
    with pytest.raises(ValueError, match="checksums must be a dict"):
        load_mnist(tmp_path, checksums=checksums)
    with pytest.raises(ValueError, match="checksums must be a dict"):
        load_cifar10(tmp_path, checksums=checksums)


def test_gzip_bomb_is_refused_by_its_decompressed_size(tmp_path, monkeypatch):
    from ibflow.data import _files

    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(bytes(4096)))
    assert read_idx_size(path, limit=5000) == 4096  # under the cap: read
    with pytest.raises(ValueError, match="more than 1000 bytes"):
        _files.gunzip(path.read_bytes(), path, limit=1000)
    # Two gzip members are one stream (gzip -c a b > c); a truncated one is named.
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert _files.gunzip(two, path) == b"abcd"
    with pytest.raises(ValueError, match="truncated"):
        _files.gunzip(gzip.compress(bytes(100))[:-12], path)


def read_idx_size(path, limit):
    from ibflow.data import _files

    return len(_files.gunzip(path.read_bytes(), path, limit=limit))


def test_cifar_archive_member_beyond_the_cap_is_refused(tmp_path, monkeypatch):
    from ibflow.data import _cifar

    monkeypatch.setattr(_cifar, "MAX_DECOMPRESSED_BYTES", 100)
    folder = tmp_path / "cifar"
    folder.mkdir()
    _write_cifar_archive(tmp_path / "cifar-10-binary.tar.gz",
                         {"data_batch_1.bin": _cifar_records(2, 0)[0]})
    with pytest.raises(ValueError, match="cap"):
        load_cifar10(tmp_path, split="train", verify_checksums=False)
