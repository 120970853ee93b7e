"""A package is checked before it is believed: hand-edited metadata, a program changed
after load, symlinks / FIFOs / paths out of the package, on both formats; every refusal a
``PackageError`` (docs/guarantees.md)."""
import json
import os
import shutil

import numpy as np
import pytest
from rely_common import FORMATS, X, Y, copy

import rlxjax

IO = "rlxjax.io"


def _edit_meta(path, edit):
    """Apply ``edit(meta dict of JSON strings)`` to the package's rlxjax metadata, as a
    hand or a hostile tool would, leaving the program and its hash alone."""
    if path.endswith(".aimodel"):
        f = os.path.join(path, "metadata.json")
        meta = json.load(open(f))
        edit(meta["creatorDefinedMetadata"])
        json.dump(meta, open(f, "w"))
        return
    from coremltools.proto import Model_pb2

    f = os.path.join(path, "Data", "com.apple.CoreML", "model.mlmodel")
    model = Model_pb2.Model()
    model.ParseFromString(open(f, "rb").read())
    ud = model.description.metadata.userDefined
    d = dict(ud)
    edit(d)
    ud.clear()
    ud.update(d)
    open(f, "wb").write(model.SerializeToString())


def _io_edit(change):
    def edit(meta):
        io = json.loads(meta[IO])
        change(io)
        meta[IO] = json.dumps(io)
    return edit


EDITS = {
    "output dtype": lambda io: io["outputs"][0].update(dtype="int32"),
    "output dtype and feature dtype": lambda io: io["outputs"][0].update(
        dtype="int32", io_dtype="int32"),
    "inputs swapped": lambda io: io["inputs"].reverse(),
    "outputs removed": lambda io: io.update(outputs=[]),
    "input reshaped": lambda io: io["inputs"][0].update(shape=[1, 3], io_shape=[1, 3]),
    "output reshaped": lambda io: io["outputs"][1].update(shape=[3, 1], io_shape=[3, 1]),
    "input renamed": lambda io: io["inputs"][0].update(mil_name="x"),
}
SAMPLE = ["output dtype", "inputs swapped"]  # in the default run; the rest under -m slow


def _params(edits):
    return [pytest.param(k, marks=() if k in SAMPLE else pytest.mark.slow) for k in edits]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("what", _params(EDITS))
def test_edited_io_metadata_is_refused(saved, tmp_path, fmt, what):
    path = copy(saved(fmt)["io"], tmp_path / f"t.{fmt}")
    rlxjax.load(path)  # the untouched copy loads
    _edit_meta(path, _io_edit(EDITS[what]))
    with pytest.raises(rlxjax.PackageError, match="metadata"):
        rlxjax.load(path)


def _function_edit(key, change):
    """Edit ``key`` of function train_step's metadata in a multifunction package."""
    def edit(meta):
        funcs = json.loads(meta["rlxjax.functions"])
        row = next(r for r in funcs["functions"] if r["name"] == "train_step")["metadata"]
        change(row[key])
        meta["rlxjax.functions"] = json.dumps(funcs)
    return edit


@pytest.mark.parametrize("fmt", FORMATS)
def test_edited_state_metadata_is_refused(saved, tmp_path, fmt):
    path = copy(saved(fmt)["mlstate"], tmp_path / f"s.{fmt}")
    if fmt == "aimodel":
        def shrink(rows):
            rows[0]["shape"] = [rows[0]["shape"][0] - 1]
        edit = _function_edit("rlxjax.states", shrink)
    else:  # Core ML's states are the program's own: the io rows are what can lie
        edit = _function_edit(IO, lambda io: io["inputs"].append(
            dict(io["inputs"][0], mil_name="z")))
    _edit_meta(path, edit)
    with pytest.raises(rlxjax.PackageError):
        rlxjax.load(path)


def test_aimodel_program_changed_after_load_is_refused_at_next_call(saved, tmp_path):
    pytest.importorskip("coreai.authoring")
    a = copy(saved("aimodel")["io"], tmp_path / "a.aimodel")
    m = rlxjax.load(a)
    feeds = {s.mil_name: np.zeros(s.shape, s.dtype) for s in m.input_specs}
    m(**feeds)
    # another program (with its matching hash) swapped in after the load
    other = saved("aimodel")["mlstate"]
    for f in ("main.mlirb", "main.hash"):
        shutil.copyfile(os.path.join(other, f), os.path.join(a, f))
    with pytest.raises(rlxjax.PackageError, match="changed since rlxjax.load"):
        m(**feeds)


@pytest.mark.parametrize("member", ["main.mlirb", "metadata.json", "main.hash"])
def test_aimodel_symlinked_member_is_refused(saved, tmp_path, member):
    pytest.importorskip("coreai.authoring")
    a = copy(saved("aimodel")["io"], tmp_path / "a.aimodel")
    outside = tmp_path / "outside"
    shutil.copyfile(os.path.join(a, member), outside)
    os.remove(os.path.join(a, member))
    os.symlink(outside, os.path.join(a, member))
    with pytest.raises(rlxjax.PackageError, match="symbolic link"):
        rlxjax.load(a)


@pytest.mark.slow
def test_aimodel_fifo_member_is_refused_without_blocking(saved, tmp_path):
    pytest.importorskip("coreai.authoring")
    a = copy(saved("aimodel")["io"], tmp_path / "a.aimodel")
    os.remove(os.path.join(a, "metadata.json"))
    os.mkfifo(os.path.join(a, "metadata.json"))
    with pytest.raises(rlxjax.PackageError, match="not a regular file"):
        rlxjax.load(a)


def _manifest_to(path, target):
    mf = os.path.join(path, "Manifest.json")
    manifest = json.load(open(mf))
    for entry in manifest["itemInfoEntries"].values():
        if entry["path"].endswith("model.mlmodel"):
            entry["path"] = target
    json.dump(manifest, open(mf, "w"))


@pytest.mark.parametrize("target", ["../../../../../../etc/passwd", "/etc/passwd", "link"])
def test_inspect_and_load_read_nothing_outside_the_package(saved, tmp_path, target, capsys):
    from rlxjax.cli import main

    path = copy(saved("mlpackage")["io"], tmp_path / "m.mlpackage")
    if target == "link":
        os.symlink("/etc/passwd", os.path.join(path, "Data", "com.apple.CoreML", "link"))
        target = "com.apple.CoreML/link"
    _manifest_to(path, target)
    with pytest.raises(rlxjax.PackageError, match="outside the package|not a relative"):
        rlxjax.load(path)
    assert main(["inspect", path]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "root:" not in out.err and "Traceback" not in out.err
    assert "outside the package" in out.err or "not a relative" in out.err


@pytest.mark.parametrize("fmt", FORMATS)
def test_make_state_reads_nothing_outside_the_folder(saved, tmp_path, fmt):
    s = saved(fmt)
    m = rlxjax.load(s["mlstate"])
    folder = copy(s["state"], tmp_path / "state")
    index = json.load(open(os.path.join(folder, "state.json")))
    name = index["states"][0]["name"]
    suffix = [f for f in os.listdir(folder) if f.startswith(name + ".")][0][len(name):]
    secret = tmp_path / ("secret" + suffix)
    shutil.copyfile(os.path.join(folder, name + suffix), secret)
    # a state file that is a symlink out of the folder
    os.remove(os.path.join(folder, name + suffix))
    os.symlink(secret, os.path.join(folder, name + suffix))
    with pytest.raises(rlxjax.PackageError, match="symbolic link"):
        m.make_state(folder)
    # a state named ../secret in the index
    os.remove(os.path.join(folder, name + suffix))
    index["states"][0]["name"] = "../secret"
    json.dump(index, open(os.path.join(folder, "state.json"), "w"))
    with pytest.raises(rlxjax.PackageError, match="not an identifier"):
        m.make_state(folder)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_untampered_package_still_runs_as_jax(saved, fmt):
    """The checks refuse nothing that rlxjax wrote: the io step's loss is JAX's."""
    import jax
    import optax
    from rely_common import P, loss

    m = rlxjax.load(saved(fmt)["io"])
    opt = optax.adam(1e-2)
    st = opt.init(P)
    feeds = dict(zip(m.input_names, jax.tree_util.tree_leaves((P, st)) + [X, Y]))
    got = m(**feeds)
    np.testing.assert_allclose(got["out"], jax.jit(loss)(P, X, Y), rtol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_arguments_are_reported_with_their_own_dtype(saved, fmt):
    m = rlxjax.load(saved(fmt)["io"])
    feeds = {s.mil_name: np.zeros(s.shape, s.dtype) for s in m.input_specs}
    feeds["x"] = np.zeros(X.shape, np.int64)
    with pytest.raises(rlxjax.ArgumentError, match=r"'x' is int64\[8, 5\] \(int32 as JAX "):
        m(**feeds)
    c = rlxjax.coreml_jit(lambda x: x * 2).lower(np.ones(3, np.float32)).compile()
    with pytest.raises(rlxjax.ArgumentError, match=r"is int64\[3\] \(int32 as JAX takes it\)"):
        c(np.ones(3, np.int64))


FUNCTIONS_EDITS = {
    "functions not a list": {"default": "train_step", "functions": 3},
    "a row not an object": {"default": "train_step", "functions": [1, 2]},
    "metadata not an object": {"default": "train_step",
                               "functions": [{"name": "train_step", "metadata": 5}]},
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("what", [pytest.param(k, marks=() if k == "metadata not an object"
                                               else pytest.mark.slow) for k in FUNCTIONS_EDITS])
def test_malformed_functions_metadata_is_a_package_error(saved, tmp_path, fmt, what):
    path = copy(saved(fmt)["mlstate"], tmp_path / f"f.{fmt}")

    def edit(meta):
        meta["rlxjax.functions"] = json.dumps(FUNCTIONS_EDITS[what])

    _edit_meta(path, edit)
    with pytest.raises(rlxjax.PackageError, match="malformed"):
        rlxjax.load(path)
