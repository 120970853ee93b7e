"""What a training run writes and prints: atomic files under SIGKILL (rlxjax/atomic.py),
``export_state``, and ``fit``'s progress bar in a terminal, in a log, and switched off."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import optax
import pytest

import rlxjax
from rlxjax import atomic


def _tiny_step(state="io"):
    return rlxjax.coreml_train_step(lambda p, x: ((p["w"] * x).sum() - 1.0) ** 2,
                                    optax.adam(0.05), state=state, backend="reference")


PARAMS = {"w": np.linspace(-1, 1, 64, dtype=np.float32)}
X = np.ones(64, np.float32)


# -- one staging scheme, one cleanup ------------------------------------------------------
def test_every_staging_name_is_one_the_cleanup_recognises(tmp_path):
    """The bug this guards: cleanup matched '.rlxjax-<pid>-' and '.rlxjax-ckpt-<pid>-' but
    export_state staged under '.rlxjax-file-<pid>-', so its leftovers stayed forever."""
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.basename(src))
        return real_replace(src, dst)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", spy)
        atomic.write_bytes(tmp_path / "a.bin", b"x")
        rlxjax.TrainState(PARAMS, {"m": X}, 3).save(tmp_path / "c.npz")
    with atomic.staging_dir(str(tmp_path)) as d:
        seen.append(os.path.basename(d))
    assert len(seen) == 3
    assert all(atomic.staging_pid(n) == os.getpid() for n in seen), seen
    # leftovers of older versions are recognised too; other hidden names are not
    for old in (".rlxjax-123-abc", ".rlxjax-ckpt-123-abc", ".rlxjax-file-123-abc"):
        assert atomic.staging_pid(old) == 123
    for other in (".rlxjax", ".rlxjax-x", ".git", "rlxjax-123-abc", ".rlxjax-weights-x"):
        assert atomic.staging_pid(other) is None


def test_failed_write_keeps_previous_file_and_leaves_nothing(tmp_path):
    path = tmp_path / "f.bin"
    atomic.write_bytes(path, b"good")

    def broken(f):
        f.write(b"ha")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic.write_file(path, broken)
    assert path.read_bytes() == b"good" and os.listdir(tmp_path) == ["f.bin"]


# -- export_state killed mid-write ----------------------------------------------------------
_CHILD = textwrap.dedent("""
    import os, shutil, sys, time
    import numpy as np, optax, rlxjax

    folder, where = sys.argv[1], sys.argv[2]
    step = rlxjax.coreml_train_step(lambda p, x: ((p["w"] * x).sum() - 1.0) ** 2,
                                    optax.adam(0.05), state="mlstate", backend="reference")
    x = np.ones(64, np.float32)
    st = step.init({"w": np.linspace(-1, 1, 64, dtype=np.float32)}, x)
    step.export_state(st, folder)                  # the previous, good export
    shutil.copytree(folder, folder + ".good")
    st, _ = step(st, x)

    def stall():
        print("WRITING", flush=True)
        time.sleep(600)                            # the parent kills us here

    if where == "mid-write":  # half of the first state file's new bytes are on disk
        real_fdopen = os.fdopen

        class HalfWritten:
            def __init__(self, f):
                self.f = f
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return self.f.__exit__(*exc)
            def write(self, data):
                self.f.write(data[:len(data) // 2])
                self.f.flush()
                stall()
            def __getattr__(self, name):
                return getattr(self.f, name)

        os.fdopen = lambda *a, **k: HalfWritten(real_fdopen(*a, **k))
    else:  # written and fsynced, about to be renamed into place
        os.replace = lambda *a: stall()
    step.export_state(st, folder)
    print("NOT KILLED", flush=True)
""")


@pytest.mark.parametrize("where", ["mid-write", "before-rename"])
def test_sigkill_during_export_state_keeps_previous_and_next_write_cleans(tmp_path, where):
    folder = str(tmp_path / "init_state")
    err = open(tmp_path / "child.err", "w+")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, folder, where],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()
        if "WRITING" not in line:
            err.seek(0)
            pytest.fail(f"child said {line!r}:\n{err.read()[-3000:]}")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        err.close()
    good = folder + ".good"
    assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == \
        sorted(os.listdir(good))
    for name in os.listdir(good):  # every file is still the previous export, byte for byte
        with open(os.path.join(good, name), "rb") as a, \
                open(os.path.join(folder, name), "rb") as b:
            assert a.read() == b.read(), name
    assert not [n for n in os.listdir(folder) if n.startswith(".")]
    # the export is staged beside the folder (exchanged with it as a whole)
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".")]
    assert leftovers and all(atomic.staging_pid(n) == proc.pid for n in leftovers), leftovers

    # the next export into the folder removes the killed writer's staging file
    step = _tiny_step("mlstate")
    st, _ = step(step.init(PARAMS, X), X)
    step.export_state(st, folder)
    assert not [n for n in os.listdir(folder) if n.startswith(".")]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
    info = json.loads(open(os.path.join(folder, "state.json")).read())
    assert info["step"] == 1 and sorted(os.listdir(folder)) == sorted(os.listdir(good))
    shutil.rmtree(good)


# -- fit's progress bar -------------------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream", ["log", "terminal", "off"])
def test_fit_progress(monkeypatch, stream):
    out = _Terminal() if stream == "terminal" else io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    step = _tiny_step()
    state, history = step.fit(step.init(PARAMS), [(X,)], 200, progress=stream != "off")
    assert len(history) == 200 and state.step == 200
    text = out.getvalue()
    if stream == "off":
        assert text == ""
    elif stream == "log":  # a few whole lines, no carriage returns piling up on one line
        lines = text.splitlines()
        assert "\r" not in text and 1 <= len(lines) <= 3, text
        assert "200/200" in lines[-1] and "loss" in lines[-1]
    else:  # redrawn in place, ends on the full bar
        assert "\r" in text and "200/200" in text.rsplit("\r", 1)[-1]
