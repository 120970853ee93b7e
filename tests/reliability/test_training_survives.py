"""Training state survives what stops training: a bad batch, an error inside the program's
run, one or two Ctrl-C, in both state modes; checkpoints and export_state folders that are
damaged, mixed or hostile. Every surviving state is compared with JAX + optax run for the
same number of steps (helpers.jax_loop)."""
import json
import os
import signal
import zipfile

import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rely_common import FORMATS, P, X, Y, copy, loss, make_step
from helpers import jax_loop

import rlxjax
from rlxjax.coreml.interpreter.interpreter import ReferenceProgram

MODES = ["io", "mlstate"]


def _assert_state_is_jax(state, steps):
    want, _ = jax_loop(loss, optax.adam(1e-2), P, (X, Y), steps)
    assert state.step == steps
    for k in P:
        np.testing.assert_allclose(state.params[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_fit_stopped_by_a_bad_batch_returns_its_progress(mode):
    step = make_step("mlpackage", mode)
    batches = [(X, Y)] * 3 + [(X, Y[:, :2])]  # the fourth batch has the wrong shape
    with pytest.raises(Exception) as info:
        step.fit(step.init(P, X, Y), batches, steps=6, progress=False)
    e = info.value
    assert len(e.history) == 3 and "fit stopped after 3 completed steps" in str(e.__notes__)
    _assert_state_is_jax(e.state, 3)
    st, _ = step(e.state, X, Y)  # and training goes on from there
    _assert_state_is_jax(st, 4)


@pytest.mark.parametrize("mode", MODES)
def test_an_error_inside_the_run_leaves_the_last_step_current(monkeypatch, mode):
    step = make_step("mlpackage", mode)
    st, _ = step(step.init(P, X, Y), X, Y)
    real = ReferenceProgram._run_function

    def dies_at_the_end(self, env):
        real(self, env)  # every op ran, every state write landed in the run's copies
        raise RuntimeError("injected: the run fails before it completes")

    monkeypatch.setattr(ReferenceProgram, "_run_function", dies_at_the_end)
    with pytest.raises(RuntimeError, match="injected"):
        step(st, X, Y)
    monkeypatch.setattr(ReferenceProgram, "_run_function", real)
    _assert_state_is_jax(st, 1)  # no half-applied update
    st2, _ = step(st, X, Y)
    _assert_state_is_jax(st2, 2)


def _interrupting(monkeypatch, times):
    """Send ``times`` SIGINTs from inside the next program run (after its ops ran)."""
    real = ReferenceProgram._run_function

    def run(self, env):
        out = real(self, env)
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGINT)
        monkeypatch.setattr(ReferenceProgram, "_run_function", real)
        return out

    monkeypatch.setattr(ReferenceProgram, "_run_function", run)


def test_one_ctrl_c_in_a_mlstate_step_lets_it_complete_then_stops_fit(monkeypatch):
    step = make_step("mlpackage", "mlstate")
    st = step.init(P, X, Y)
    st, _ = step(st, X, Y)
    _interrupting(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt) as info:
        step.fit(st, [(X, Y)], steps=5, progress=False)
    # the interrupted step completed: device and counter advanced together
    assert len(info.value.history) == 1
    _assert_state_is_jax(info.value.state, 2)


def test_a_second_ctrl_c_stops_the_step_at_once_and_the_state_stays(monkeypatch):
    step = make_step("mlpackage", "mlstate")
    st, _ = step(step.init(P, X, Y), X, Y)
    _interrupting(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        step(st, X, Y)
    _assert_state_is_jax(st, 1)  # still current: the run's writes were never committed


# -- checkpoints ----------------------------------------------------------------------------
def _damage(path, how):
    data = open(path, "rb").read()
    if how == "empty":
        data = b""
    elif how == "truncated":
        data = data[:len(data) // 2]
    elif how == "flip-middle":
        k = len(data) // 2
        data = data[:k] + bytes([data[k] ^ 0x01]) + data[k + 1:]
    elif how == "byte-flipped":  # the last byte of the second array's values
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("leaf_1.npy")
        extra = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
        k = info.header_offset + 30 + len(info.filename) + extra + info.compress_size - 1
        data = data[:k] + bytes([data[k] ^ 0x01]) + data[k + 1:]
    elif how == "missing member":
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        with zipfile.ZipFile(path, "w") as z:
            for n, b in members.items():
                if n != "leaf_1.npy":
                    z.writestr(n, b)
        return
    elif how == "garbage":
        data = b"PK\x03\x04" + os.urandom(200)
    open(path, "wb").write(data)


@pytest.mark.parametrize("how", ["empty", "byte-flipped", "missing member"] + [
    pytest.param(h, marks=pytest.mark.slow) for h in ("truncated", "garbage")])
def test_a_damaged_checkpoint_is_a_package_error_naming_it(tmp_path, how):
    step = make_step("mlpackage", "io")
    st, _ = step(step.init(P, X, Y), X, Y)
    path = st.save(tmp_path / "ckpt.npz")
    assert rlxjax.TrainState.load(path, st).step == 1
    _damage(path, how)
    with pytest.raises(rlxjax.PackageError, match="ckpt.npz"):
        rlxjax.TrainState.load(path, st)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_any_flipped_bit_is_refused_or_harmless(tmp_path, where, bit):
    """A checkpoint with any one bit flipped loads its exact values or is refused: never
    other values."""
    leaves = [np.arange(6, dtype=np.float32), np.full(4, 3, np.int32)]
    path = str(tmp_path / "c.npz")
    from rlxjax.training.checkpoint import load_checkpoint, save_checkpoint

    save_checkpoint(path, 3, leaves)
    data = bytearray(open(path, "rb").read())
    data[int(where * len(data))] ^= 1 << bit
    open(path, "wb").write(bytes(data))
    try:
        step, got = load_checkpoint(path, leaves)
    except rlxjax.PackageError as e:
        assert "c.npz" in str(e)
        return
    except rlxjax.ArgumentError as e:  # a header saying another shape / dtype / count
        assert "checkpoint" in str(e)
        return
    assert step == 3 and all(np.array_equal(a, b) and a.dtype == b.dtype
                             for a, b in zip(got, leaves))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", ["garbage json", "byte-flipped file"] + [
    pytest.param(h, marks=pytest.mark.slow) for h in ("not an object", "truncated file",
                                                      "missing file", "negative shape")])
def test_a_damaged_export_state_folder_is_refused_by_name(saved, tmp_path, fmt, how):
    s = saved(fmt)
    m = rlxjax.load(s["mlstate"])
    folder = copy(s["state"], tmp_path / "state")
    index_path = os.path.join(folder, "state.json")
    index = json.load(open(index_path))
    row = index["states"][0]
    f = os.path.join(folder, [n for n in os.listdir(folder)
                              if n.startswith(row["name"] + ".")][0])
    if how == "garbage json":
        open(index_path, "w").write("{not json")
    elif how == "not an object":
        open(index_path, "w").write("[1, 2]")
    elif how == "negative shape":
        row["shape"] = [-1]
        json.dump(index, open(index_path, "w"))
    elif how == "missing file":
        os.remove(f)
    else:
        _damage(f, "flip-middle" if how == "byte-flipped file" else "truncated")
    with pytest.raises(rlxjax.RlxError) as info:
        m.make_state(folder)
    assert folder in str(info.value) and "export" in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_state_replaces_a_previous_export_as_a_whole(tmp_path, fmt):
    step = make_step(fmt, "mlstate")
    st, _ = step(step.init(P, X, Y), X, Y)
    folder = str(tmp_path / "state")
    step.export_state(st, folder)
    st, _ = step(st, X, Y)
    step.export_state(st, folder)
    assert json.load(open(os.path.join(folder, "state.json")))["step"] == 2
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
    m = rlxjax.load(step.save(str(tmp_path / f"p.{fmt}")))
    m.make_state(folder)  # the manifest checks out
    # a folder holding something else is never replaced
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(rlxjax.PackageError, match="no export_state folder"):
        step.export_state(st, str(other))
    assert (other / "notes.txt").read_text() == "keep me"
