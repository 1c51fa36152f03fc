"""A sweep's identity is its content (issue "Results that cannot be silently wrong", items 1, 4
and 11): builds, options and functions by what they compute with, sweep.json checked against its
own hash, every unreadable or malformed chunk recomputed. Most cases compile nothing."""

import functools
import json
import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import ibflow
from ibflow._sweep import identity, plan, store

# --- describe / digest: equal content, equal identity; any difference, another -------------------


def _power(p):
    return lambda x: x**p


def _scaled(k):
    def f(x):
        return k * x
    return f


LIMIT = 3.0


def _reads_global(x):
    return x * LIMIT


def _twice(x):
    return 2 * x


SAME = {
    "float": (1e-6, 1e-6),
    "array-copy": (np.arange(5.0), np.arange(5.0).copy()),
    "jax-vs-numpy-array": (jnp.arange(3.0), np.arange(3.0)),
    "closure-same-value": (_power(2), _power(2)),
    "module": (ibflow.MirrorFlow(ibflow.CubicPotential()),
               ibflow.MirrorFlow(ibflow.CubicPotential())),
    "function-potential": (ibflow.FunctionPotential(_power(2)),
                           ibflow.FunctionPotential(_power(2))),
    "partial": (functools.partial(_scaled, 2.0), functools.partial(_scaled, 2.0)),
    "dict-order": ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    "library-function": (jnp.tanh, jnp.tanh),
    "diagonal-net": (ibflow.DiagonalNet.from_scale_shape(0.1, 0.5, dim=4),
                     ibflow.DiagonalNet.from_scale_shape(0.1, 0.5, dim=4)),
}

DIFFERENT = {
    "float-last-bit": (1e-6, np.nextafter(1e-6, 1.0).item()),
    "int-vs-float": (1, 1.0),
    "array-one-entry": (np.zeros(5000), np.where(np.arange(5000) == 2500, 1e-300, 0.0)),
    "array-dtype": (np.zeros(3), np.zeros(3, np.float32)),
    "array-shape": (np.zeros(4), np.zeros((2, 2))),
    "closure-value": (_power(2), _power(3)),  # item 1: make_build(K) with another K
    "lambda-code": (lambda x: x + 1, lambda x: x - 1),
    "function-potential": (ibflow.FunctionPotential(_power(2)),
                           ibflow.FunctionPotential(_power(4))),
    "module-field": (ibflow.MirrorFlow(ibflow.CubicPotential()),
                     ibflow.MirrorFlow(ibflow.QuadraticPotential())),
    "partial-arg": (functools.partial(_scaled, 2.0), functools.partial(_scaled, 3.0)),
    "tuple-vs-list": ((1, 2), [1, 2]),
    "nan-vs-inf": (float("nan"), float("inf")),
    "diagonal-scale": (ibflow.DiagonalNet.from_scale_shape(0.1, 0.5, dim=4),
                       ibflow.DiagonalNet.from_scale_shape(0.1 * (1 + 1e-15), 0.5, dim=4)),
    "diagonal-shape": (ibflow.DiagonalNet.from_scale_shape(0.1, 0.5, dim=4),
                       ibflow.DiagonalNet.from_scale_shape(0.1, 0.4, dim=4)),
    "library-functions": (jnp.tanh, jnp.sin),
    "global-function": (_reads_global, _twice),
}


@pytest.mark.parametrize("name", sorted(SAME))
def test_equal_content_has_one_identity(name):
    a, b = SAME[name]
    assert identity.digest(identity.describe(a)) == identity.digest(identity.describe(b))


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_different_content_has_another_identity(name):
    a, b = DIFFERENT[name]
    assert identity.digest(identity.describe(a)) != identity.digest(identity.describe(b))


def test_a_module_constant_a_function_reads_is_part_of_its_identity(monkeypatch):
    # Item 2's build: the code is the same, the module-level value it reads is not.
    before = identity.digest(identity.describe(_reads_global))
    monkeypatch.setattr(f"{__name__}.LIMIT", 4.0)
    assert identity.digest(identity.describe(_reads_global)) != before


class _Opaque:
    pass


@pytest.mark.parametrize("value", [_Opaque(), np.array([object()], dtype=object),
                                   iter([1]), ibflow.FunctionPotential(_Opaque)])
def test_an_unknown_object_is_unidentifiable_by_name(value):
    try:
        identity.describe(value, "flow")
    except identity.Unidentifiable as e:
        assert "flow" in str(e) or "array" in str(e)
    else:  # a class is identified by its qualified name
        assert isinstance(value, ibflow.FunctionPotential)


def test_description_is_strict_json_with_non_finite_as_strings():
    text = identity.canonical(identity.describe({"a": float("inf"), "b": np.array([np.nan])}))
    assert "Infinity" not in text and "NaN" not in text
    assert '"inf"' in text and '"nan"' in text


def test_self_referencing_function_terminates():
    def f(x):
        return f(x - 1) if x else 0

    assert identity.digest(identity.describe(f))


# --- sweep.json: recomputed hash; every malformed file refused by name --------------------------

def _directory(tmp_path, config=None, **meta):
    config = config or {"axes": {"scale": [0.1, 0.2]}, "datasets": 1, "option_axes": [],
                        "chunk_size": 2, "chunks": [[0, 1]],
                        "fields": {"loss": ["<f8", []]}}
    metadata = {"config_hash": plan.config_hash(config), "config": config,
                "dims": list(config["axes"])} | meta
    (tmp_path / "sweep.json").write_text(json.dumps(metadata))
    return metadata


def _edit(tmp_path, fn, rehash=False):
    path = tmp_path / "sweep.json"
    meta = json.loads(path.read_text())
    fn(meta)
    if rehash:
        meta["config_hash"] = plan.config_hash(meta["config"])
    path.write_text(json.dumps(meta))


def _set(key, value):
    return lambda m: m["config"].__setitem__(key, value)


EDITS = {  # edit, recompute the hash afterwards, expected message
    "axes-edited-hash-kept": (_set("axes", {"scale": [0.1, 0.3]}), False, "config_hash"),
    "chunk-size-edited": (_set("chunk_size", 1), False, "config_hash"),
    "no-config": (lambda m: m.pop("config"), False, '"config"'),
    "config-not-object": (lambda m: m.__setitem__("config", [1]), False, '"config"'),
    "config-without-axes": (lambda m: m["config"].pop("axes"), True, "without"),
    "axes-not-numbers": (_set("axes", {"scale": ["a"]}), True, "axes"),
    "axes-empty": (_set("axes", {}), True, "axes"),
    "chunks-not-partition": (_set("chunks", [[0]]), True, "partition"),
    "chunks-repeat": (_set("chunks", [[0, 0]]), True, "partition"),
    "fields-malformed": (_set("fields", {"loss": "f8"}), True, "fields"),
    "datasets-zero": (_set("datasets", 0), True, "data sets"),
    "dims-wrong": (lambda m: m.__setitem__("dims", ["shape"]), False, "dims"),
    "non-finite-number": (_set("axes", {"scale": [float("nan"), 0.2]}), False, "strict JSON"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_open_sweep_refuses_an_inconsistent_sweep_json(tmp_path, name):
    _directory(tmp_path)
    edit, rehash, message = EDITS[name]
    _edit(tmp_path, edit, rehash)
    with pytest.raises(ValueError, match=message):
        ibflow.SweepResult.load(tmp_path)


def test_consistent_sweep_json_without_chunks_reads_not_computed(tmp_path):
    _directory(tmp_path)
    with pytest.warns(UserWarning, match="0 of 1 chunks"):
        res = ibflow.SweepResult.load(tmp_path)
    assert np.all(np.isnan(res["loss"]))


def test_sweep_json_is_written_as_strict_json(tmp_path):
    s = store.Store(tmp_path)
    s.write_metadata({"config_hash": "x", "a": float("inf"), "b": [np.float64("nan")],
                      "c": (1, 2)})
    text = (tmp_path / "sweep.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert json.loads(text)["a"] == "inf" and json.loads(text)["b"] == ["nan"]


# --- chunks: any unreadable or malformed chunk is recomputed, never raises ----------------------

FIELDS = {"loss": ["<f8", []], "steps": ["<i8", []], "predictor": ["<f8", [3]]}
INDEX = np.array([0, 1])


def _chunk(tmp_path, **override):
    record = {"loss": np.array([1e-3, 2e-3]), "steps": np.array([5, 6]),
              "predictor": np.ones((2, 3)), "index": INDEX} | override
    s = store.Store(tmp_path)
    s.save_chunk(0, {k: v for k, v in record.items() if v is not None}, config_hash="h",
                 dataset=0)
    return s


def _load(s):
    return s.load_chunk(0, config_hash="h", dataset=0, index=INDEX, fields=FIELDS)


MALFORMED = {
    "loss-float32": dict(loss=np.array([1e-3, 2e-3], np.float32)),
    "loss-2d": dict(loss=np.ones((2, 1))),
    "loss-0d": dict(loss=np.array(1.0)),
    "loss-strings": dict(loss=np.array(["a", "b"])),
    "steps-float": dict(steps=np.array([5.0, 6.0])),
    "predictor-wrong-width": dict(predictor=np.ones((2, 4))),
    "predictor-1d": dict(predictor=np.ones(2)),
    "index-float": dict(index=np.array([0.0, 1.0])),
    "index-strings": dict(index=np.array(["0", "1"])),
    "extra-field": dict(extra=np.ones(2)),
    "missing-field": dict(steps=None),
    "complex-loss": dict(loss=np.ones(2, complex)),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_chunk_with_the_right_hash_but_malformed_entries_is_recomputed(tmp_path, name):
    s = _chunk(tmp_path, **MALFORMED[name])
    with pytest.warns(UserWarning, match="chunk-00000.npz"):
        assert _load(s) is None


def test_wellformed_chunk_is_used(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = _load(_chunk(tmp_path))
    assert rec["loss"].tolist() == [1e-3, 2e-3]


@pytest.mark.parametrize("pattern", [0xFF, 0x01, 0x80])
def test_every_single_byte_flip_is_recomputed_or_read_exactly(tmp_path, pattern):
    """Item 11: some flips (e.g. of a compression-method field) made zipfile raise
    NotImplementedError, which escaped the store. Now every flip gives the original record or a
    warning naming the file and None."""
    s = _chunk(tmp_path)
    path = s.chunk_path(0)
    original = path.read_bytes()
    good = _load(s)
    outcomes = {"recomputed": 0, "intact": 0}
    for offset in range(len(original)):
        damaged = bytearray(original)
        damaged[offset] ^= pattern
        path.write_bytes(bytes(damaged))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rec = _load(s)
        if rec is None:
            assert any("chunk-00000.npz" in str(w.message) for w in caught), offset
            outcomes["recomputed"] += 1
        else:  # a flip in bytes nothing reads (e.g. a zip timestamp): the same record
            assert all(np.array_equal(rec[k], good[k]) for k in good), offset
            assert rec.keys() == good.keys()
            outcomes["intact"] += 1
    assert outcomes["recomputed"] > len(original) // 2


# --- sweeps: identity by content, function-valued options ---------------------------------------

D = 6
X = np.random.default_rng(0).normal(size=(4, D))
Y = X[:, 0] + X[:, 1]
FAST = dict(progress=False, references=(), chunk_size=2, stiff_solver=None, target_loss=1e-8,
            order=None)


def make_build(k):
    return lambda scale: ibflow.DiagonalNet.from_scale_shape(scale * k, 0.0, dim=D)


def test_closure_built_sweeps_with_other_values_are_other_sweeps(tmp_path):
    """Item 1: make_build(1) then make_build(100) into one `out`: the second is refused (its
    content differs), and run apart it gives its own results, not the first one's chunks."""
    grid = ibflow.Grid(scale=[0.01, 0.02])
    first = ibflow.sweep(make_build(1), grid, (X, Y), out=tmp_path / "a", **FAST)
    with pytest.raises(ValueError, match="different sweep"):
        ibflow.sweep(make_build(100), grid, (X, Y), out=tmp_path / "a", **FAST)
    other = ibflow.sweep(make_build(100), grid, (X, Y), out=tmp_path / "b", **FAST)
    assert first.metadata["config_hash"] != other.metadata["config_hash"]
    assert not np.array_equal(first["parameters"], other["parameters"])
    # The same content again (a new closure object): the same sweep, resumed from its chunks.
    again = ibflow.sweep(make_build(1), grid, (X, Y), out=tmp_path / "a", **FAST)
    assert again.metadata["config_hash"] == first.metadata["config_hash"]
    options = json.loads((tmp_path / "a" / "sweep.json").read_text())["config"]
    assert options["integrate_options"]["target_loss"]["value"] == 1e-8  # a value, not a hash
    assert len(options["integrate_options"]["target_loss"]["sha256"]) == 16


class _Callable:
    def __call__(self, x):
        return x**2


def test_unidentifiable_option_is_refused_for_out_by_name(tmp_path):
    flow = ibflow.MirrorFlow(ibflow.FunctionPotential(_Callable()))
    with pytest.raises(ValueError, match="flow.*out=None"):
        ibflow.sweep(make_build(1), ibflow.Grid(scale=[0.01]), (X, Y), out=tmp_path, flow=flow,
                     **FAST)
    assert not (tmp_path / "sweep.json").exists()


def test_function_valued_option_has_a_stable_identity():
    """Item 11: MirrorFlow(FunctionPotential(lambda x: x**2)) once hashed differently in every
    process (a repr with an address); two separately made equal lambdas now agree."""
    a = ibflow.MirrorFlow(ibflow.FunctionPotential(lambda x: x**2))
    b = ibflow.MirrorFlow(ibflow.FunctionPotential(lambda x: x**2))
    assert identity.digest(identity.describe(a)) == identity.digest(identity.describe(b))
    text = identity.canonical(identity.describe(a))
    assert "0x" not in text  # no memory address


class _Build(eqx.Module):
    k: float

    def __call__(self, scale):
        return ibflow.DiagonalNet.from_scale_shape(scale * self.k, 0.0, dim=D)


def test_module_builds_with_other_fields_have_other_identities():
    assert (identity.digest(identity.describe(_Build(1.0)))
            != identity.digest(identity.describe(_Build(2.0))))
