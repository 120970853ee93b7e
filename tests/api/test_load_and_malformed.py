"""rlxjax.load on saved packages; malformed packages give RlxError; saves are atomic under
SIGKILL (issue 9, items 4 and 5)."""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rlxjax
from rlxjax.coreml.package import PackageError
from rlxjax.coreml.interpreter import ReferenceRuntimeError

MODEL_REL = os.path.join("Data", "com.apple.CoreML", "model.mlmodel")
WEIGHT_REL = os.path.join("Data", "com.apple.CoreML", "weights", "weight.bin")

W = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((30,)).astype(np.float32)


def _fn(x, s, m):
    return {"y": x @ W + B * s, "z": m & (s > 0)}


ARGS = (np.linspace(-1, 1, 80, dtype=np.float32).reshape(2, 40), np.float32(2.0),
        np.array([True, False]))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    compiled = rlxjax.coreml_jit(_fn).lower(*ARGS).compile()
    path = compiled.save(tmp_path_factory.mktemp("pkg") / "m.mlpackage")
    return path, compiled(*ARGS)


def _copy(saved, tmp_path, name="c.mlpackage"):
    dst = str(tmp_path / name)
    shutil.copytree(saved[0], dst)
    return dst


def _spec(pkg):
    from coremltools.proto import Model_pb2

    m = Model_pb2.Model()
    with open(os.path.join(pkg, MODEL_REL), "rb") as f:
        m.ParseFromString(f.read())
    return m


def _blob_values(model):
    for fn in model.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            for op in block.operations:
                if op.type == "const" and op.attributes["val"].WhichOneof("value") == \
                        "blobFileValue":
                    yield op.attributes["val"].blobFileValue


def _load_and_run(pkg):
    """Everything a user does with a package; only RlxError may come out."""
    m = rlxjax.load(pkg, backend="reference", flat=True)
    return m(*ARGS)


# -- loading and running ----------------------------------------------------------------------

def test_load_rlxjax_package_matches_compiled(saved):
    path, expected = saved
    m = rlxjax.load(path, backend="reference", flat=True)
    assert m.input_names == ("x", "s", "m")
    out = m(*ARGS)
    assert set(out) == {"out_y", "out_z"}
    np.testing.assert_allclose(out["out_y"], expected["y"], rtol=1e-6)
    assert out["out_z"].dtype == np.bool_ and (out["out_z"] == expected["z"]).all()
    # keywords, and the rank-0 input as a python float (canonicalized like Compiled)
    out2 = m(m=ARGS[2], s=2.0, x=ARGS[0])
    np.testing.assert_array_equal(out2["out_y"], out["out_y"])


def test_load_argument_errors(saved):
    m = rlxjax.load(saved[0], backend="reference", flat=True)
    with pytest.raises(rlxjax.ArgumentError, match="missing"):
        m(ARGS[0])
    with pytest.raises(rlxjax.ArgumentError, match="unknown"):
        m(*ARGS, nope=1)
    with pytest.raises(rlxjax.ArgumentError, match="float32"):
        m(ARGS[0][:1], *ARGS[1:])
    with pytest.raises(rlxjax.ArgumentError):
        m(*ARGS, *ARGS)


def _ct_package(tmp_path, name, body):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return body(mb, x)

    model = ct.convert(prog, convert_to="mlprogram", skip_model_load=True,
                       compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS17)
    path = str(tmp_path / name)
    model.save(path)
    return path


def test_load_coremltools_package(tmp_path):
    w = np.arange(600, dtype=np.float32).reshape(3, 200) / 100  # big enough for weight.bin
    path = _ct_package(tmp_path, "ct.mlpackage",
                       lambda mb, x: mb.relu(x=mb.matmul(x=x, y=w), name="out"))
    assert os.path.getsize(os.path.join(path, WEIGHT_REL)) > w.nbytes
    m = rlxjax.load(path, backend="reference", flat=True)
    assert m.input_names == ("x",) and m.output_names == ("out",) and m.input_specs is None
    x = np.linspace(-1, 1, 6).reshape(2, 3)  # float64: cast to the feature's fp32
    np.testing.assert_allclose(m(x=x)["out"], np.maximum(x.astype(np.float32) @ w, 0),
                               rtol=1e-5)


def test_load_coremltools_package_with_unsupported_op(tmp_path):
    path = _ct_package(tmp_path, "topk.mlpackage",
                       lambda mb, x: mb.topk(x=x, k=2, axis=-1, name="out")[0])
    with pytest.raises(ReferenceRuntimeError, match="topk"):
        rlxjax.load(path, backend="reference", flat=True)


# -- malformed packages -------------------------------------------------------------------------

def test_missing_and_non_packages(tmp_path):
    with pytest.raises(PackageError, match="no such package"):
        rlxjax.load(tmp_path / "absent.mlpackage", flat=True)
    (tmp_path / "file.mlpackage").write_bytes(b"x")
    with pytest.raises(PackageError, match="not a folder"):
        rlxjax.load(tmp_path / "file.mlpackage", flat=True)
    (tmp_path / "empty.mlpackage").mkdir()
    with pytest.raises(PackageError, match="Manifest.json"):
        rlxjax.load(tmp_path / "empty.mlpackage", flat=True)
    assert issubclass(PackageError, rlxjax.RlxError)


@pytest.mark.parametrize("manifest", [
    b"\x00\xff not json", b"[]", b"{}", json.dumps({"itemInfoEntries": {}}).encode(),
    json.dumps({"rootModelIdentifier": "a", "itemInfoEntries": {"a": {"path": "../../x"}}}
               ).encode(),
    json.dumps({"rootModelIdentifier": "a", "itemInfoEntries": {"a": {"path": "nope"}}}
               ).encode(),
    json.dumps({"rootModelIdentifier": "a", "itemInfoEntries": {"a": 3}}).encode(),
])
def test_malformed_manifest(saved, tmp_path, manifest):
    pkg = _copy(saved, tmp_path)
    with open(os.path.join(pkg, "Manifest.json"), "wb") as f:
        f.write(manifest)
    with pytest.raises(PackageError):
        _load_and_run(pkg)


def test_missing_model_file_and_weights(saved, tmp_path):
    pkg = _copy(saved, tmp_path, "a.mlpackage")
    os.remove(os.path.join(pkg, WEIGHT_REL))
    with pytest.raises(ReferenceRuntimeError, match="weight"):
        _load_and_run(pkg)
    pkg = _copy(saved, tmp_path, "b.mlpackage")
    os.remove(os.path.join(pkg, MODEL_REL))
    with pytest.raises(PackageError, match="missing"):
        _load_and_run(pkg)


def test_corrupted_model_protobuf(saved, tmp_path):
    pkg = _copy(saved, tmp_path)
    model_file = os.path.join(pkg, MODEL_REL)
    good = open(model_file, "rb").read()
    rng = np.random.default_rng(0)
    variants = [b"", rng.bytes(len(good)), rng.bytes(17), b"\xff" * 64]
    variants += [good[:n] for n in (1, 7, len(good) // 3, len(good) // 2, len(good) - 1)]
    for data in variants:
        with open(model_file, "wb") as f:
            f.write(data)
        with pytest.raises(rlxjax.RlxError):
            _load_and_run(pkg)


from coremltools.libmilstoragepython import _BlobStorageReader as _REAL_READER  # noqa: E402


class _ReaderSpy:
    """Stands in for coremltools' blob reader to show that a bad header is refused before
    the reader (which trusts the header) touches the file."""
    reads = 0

    def __init__(self, path):
        self._real = _REAL_READER(path)

    def __getattr__(self, name):
        type(self).reads += 1
        return getattr(self._real, name)


@pytest.mark.parametrize("offset", [0, 1, 65, 10**15, 2**63 - 1, "data", "end"])
def test_blob_offset_out_of_range(saved, tmp_path, offset):
    pkg = _copy(saved, tmp_path)
    model = _spec(pkg)
    size = os.path.getsize(os.path.join(pkg, WEIGHT_REL))
    for bf in _blob_values(model):
        bf.offset = {"data": bf.offset + 64, "end": size - 32}.get(offset, offset)
    with open(os.path.join(pkg, MODEL_REL), "wb") as f:
        f.write(model.SerializeToString())
    with pytest.raises(ReferenceRuntimeError, match="blob"):
        _load_and_run(pkg)


@pytest.mark.parametrize("field,value", [("size", 1 << 40), ("size", 2**64 - 1),
                                         ("size", 4), ("data_offset", 1 << 40),
                                         ("data_offset", 0), ("sentinel", 0)])
def test_corrupted_blob_header_is_refused_before_reading(saved, tmp_path, monkeypatch,
                                                         field, value):
    import coremltools.libmilstoragepython as storage

    pkg = _copy(saved, tmp_path)
    wfile = os.path.join(pkg, WEIGHT_REL)
    offset = next(_blob_values(_spec(pkg))).offset
    data = bytearray(open(wfile, "rb").read())
    at, fmt = {"sentinel": (0, "<I"), "size": (8, "<Q"), "data_offset": (16, "<Q")}[field]
    data[offset + at: offset + at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    open(wfile, "wb").write(bytes(data))
    monkeypatch.setattr(storage, "_BlobStorageReader", _ReaderSpy)
    _ReaderSpy.reads = 0
    with pytest.raises(ReferenceRuntimeError, match="blob"):
        _load_and_run(pkg)
    assert _ReaderSpy.reads == 0


def test_truncated_weight_file(saved, tmp_path):
    pkg = _copy(saved, tmp_path)
    wfile = os.path.join(pkg, WEIGHT_REL)
    good = open(wfile, "rb").read()
    for n in (0, 10, 64, 100, 128, 129, len(good) // 2, len(good) - 1):
        open(wfile, "wb").write(good[:n])
        with pytest.raises(ReferenceRuntimeError, match="blob|weight"):
            _load_and_run(pkg)


# -- weight files outside the package ------------------------------------------------------------
# A package is untrusted input: every file it references must lie inside it. Each case points
# the program's blobs at a perfectly valid weight file outside the package (a copy of its
# own), so only the confinement can refuse it.

def _outside_copy(saved, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copy(os.path.join(saved[0], WEIGHT_REL), outside / "weight.bin")
    return str(outside / "weight.bin")


def _set_blob_names(pkg, name):
    model = _spec(pkg)
    for bf in _blob_values(model):
        bf.fileName = name
    with open(os.path.join(pkg, MODEL_REL), "wb") as f:
        f.write(model.SerializeToString())


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "no-prefix", "absolute-no-prefix",
                                  "model-path-only", "symlink-file"])
def test_blob_file_outside_the_package_is_refused(saved, tmp_path, kind):
    pkg = _copy(saved, tmp_path)
    target = _outside_copy(saved, tmp_path)
    weights = os.path.join(pkg, os.path.dirname(WEIGHT_REL))
    if kind == "symlink-file":
        os.symlink(target, os.path.join(weights, "link.bin"))
    name = {"dotdot": "@model_path/weights/" + os.path.relpath(target, weights),
            "absolute": "@model_path/weights/" + target,
            "no-prefix": "weights/weight.bin",
            "absolute-no-prefix": target,
            "model-path-only": "@model_path/weights/",
            "symlink-file": "@model_path/weights/link.bin"}[kind]
    _set_blob_names(pkg, name)
    with pytest.raises(PackageError, match="weight"):
        _load_and_run(pkg)
    # The reference interpreter confines them too, whoever hands it the program.
    from rlxjax.coreml.backends import reference_program
    with pytest.raises(ReferenceRuntimeError, match="refus|names no weight"):
        reference_program(_spec(pkg), weights)


@pytest.mark.parametrize("link", ["weights", "Data"])
def test_symlinked_folder_out_of_the_package_is_refused(saved, tmp_path, link):
    pkg = _copy(saved, tmp_path)
    outside = str(tmp_path / "outside-folder")
    folder = os.path.join(pkg, "Data") if link == "Data" else os.path.join(
        pkg, os.path.dirname(WEIGHT_REL))
    shutil.move(folder, outside)
    os.symlink(outside, folder)
    with pytest.raises(PackageError, match="outside the package"):
        _load_and_run(pkg)


def test_symlink_inside_the_package_is_allowed(saved, tmp_path):
    pkg = _copy(saved, tmp_path)
    weights = os.path.join(pkg, os.path.dirname(WEIGHT_REL))
    os.rename(os.path.join(weights, "weight.bin"), os.path.join(weights, "real.bin"))
    os.symlink("real.bin", os.path.join(weights, "weight.bin"))
    out = _load_and_run(pkg)
    np.testing.assert_allclose(out["out_y"], saved[1]["y"], rtol=1e-6)


_FUZZ = settings(max_examples=50, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])


@st.composite
def _mutations(draw, limit):
    n = draw(st.integers(0, 8))
    edits = [(draw(st.integers(0, limit - 1)), draw(st.integers(0, 255))) for _ in range(n)]
    cut = draw(st.one_of(st.none(), st.integers(0, limit)))
    return edits, cut


def _mutate(data, mutation):
    edits, cut = mutation
    data = bytearray(data)
    for i, b in edits:
        if i < len(data):
            data[i] = b
    return bytes(data[:cut] if cut is not None else data)


def _fuzz(saved, tmp_path, rel, mutation):
    pkg = os.path.join(tmp_path, "fuzz.mlpackage")
    if not os.path.isdir(pkg):
        shutil.copytree(saved[0], pkg)
    target = os.path.join(pkg, rel)
    good = open(os.path.join(saved[0], rel), "rb").read()
    open(target, "wb").write(_mutate(good, mutation))
    try:
        _load_and_run(pkg)
    except rlxjax.RlxError:
        pass


@_FUZZ
@given(mutation=_mutations(300))  # header, blob metadata and the start of the data
def test_fuzz_weight_file(saved, tmp_path, mutation):
    _fuzz(saved, str(tmp_path), WEIGHT_REL, mutation)


@_FUZZ
@given(mutation=_mutations(1200))
def test_fuzz_model_protobuf(saved, tmp_path, mutation):
    _fuzz(saved, str(tmp_path), MODEL_REL, mutation)


# -- atomic saves under SIGKILL -----------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import rlxjax, rlxjax.atomic as atomic
    seed, mode, pkg, ckpt = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    w = np.random.default_rng(seed).standard_normal((512, 1024)).astype(np.float32)  # 2 MB
    f = rlxjax.coreml_jit(lambda x: x @ w, backend="reference")
    compiled = f.lower(np.ones((1, 512), np.float32)).compile()
    state = rlxjax.TrainState({"w": w}, {"mu": w * 2}, step=seed)

    def announce_and_sleep(what, real):
        def wrapped(*a, **k):
            print(what, flush=True)
            time.sleep(60)
            return real(*a, **k)
        return wrapped

    if mode == "pause":  # staged and ready to move into place: the parent kills us here
        atomic.replace_dir = announce_and_sleep("STAGED", atomic.replace_dir)  # every package
        compiled.save(pkg)
    elif mode == "pause-ckpt":
        os.replace = announce_and_sleep("STAGED", os.replace)
        state.save(ckpt)
    else:  # save over and over; the parent kills us at a random moment
        print("READY", flush=True)
        while True:
            compiled.save(pkg)
            state.save(ckpt)
""")


def _expected(seed):
    w = np.random.default_rng(seed).standard_normal((512, 1024)).astype(np.float32)
    return w, np.ones((1, 512), np.float32) @ w


def _child(seed, mode, pkg, ckpt):
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(seed), mode, pkg, ckpt],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _wait_for(proc, word):
    t0 = time.time()
    line = proc.stdout.readline()
    assert word in line, f"child said {line!r} after {time.time() - t0:.1f}s"


def _check_intact(folder, pkg, ckpt, seeds):
    """The package and checkpoint are whole and come from one of ``seeds``."""
    out = rlxjax.load(pkg, backend="reference", flat=True)(x=np.ones((1, 512), np.float32))
    outs = [k for k in out]
    assert len(outs) == 1
    match = [s for s in seeds if np.allclose(out[outs[0]], _expected(s)[1], rtol=1e-5, atol=1e-4)]
    assert match, "package holds neither the old nor the new program"
    like = rlxjax.TrainState({"w": np.zeros((512, 1024), np.float32)},
                             {"mu": np.zeros((512, 1024), np.float32)})
    st_ = rlxjax.TrainState.load(ckpt, like)
    assert st_.step in seeds
    np.testing.assert_array_equal(st_.params["w"], _expected(st_.step)[0])
    visible = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    assert visible == ["m.mlpackage", "state.npz"], visible  # no half-written folder
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


@pytest.mark.parametrize("mode", ["pause", "pause-ckpt"])
def test_sigkill_between_staging_and_rename_keeps_previous(tmp_path, mode):
    folder = str(tmp_path)
    pkg, ckpt = os.path.join(folder, "m.mlpackage"), os.path.join(folder, "state.npz")
    w, _ = _expected(1)
    rlxjax.coreml_jit(lambda x: x @ w, backend="reference").lower(
        np.ones((1, 512), np.float32)).compile().save(pkg)
    rlxjax.TrainState({"w": w}, {"mu": w * 2}, step=1).save(ckpt)
    proc = _child(2, mode, pkg, ckpt)
    try:
        _wait_for(proc, "STAGED")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    leftovers = _check_intact(folder, pkg, ckpt, seeds=[1])
    # The killed save leaves its hidden staging area behind (nothing cleans it up later).
    assert leftovers and all(n.startswith(".rlxjax-") for n in leftovers), leftovers


def test_sigkill_at_random_moments_during_saves(tmp_path):
    folder = str(tmp_path)
    pkg, ckpt = os.path.join(folder, "m.mlpackage"), os.path.join(folder, "state.npz")
    w, _ = _expected(1)
    rlxjax.coreml_jit(lambda x: x @ w, backend="reference").lower(
        np.ones((1, 512), np.float32)).compile().save(pkg)
    rlxjax.TrainState({"w": w}, {"mu": w * 2}, step=1).save(ckpt)
    rng = random.Random(0)
    for seed in (2, 3):
        proc = _child(seed, "loop", pkg, ckpt)
        try:
            _wait_for(proc, "READY")
            time.sleep(rng.uniform(0.05, 0.5))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        leftovers = _check_intact(folder, pkg, ckpt, seeds=[1, 2, 3])
        assert all(n.startswith(".rlxjax-") for n in leftovers), leftovers
