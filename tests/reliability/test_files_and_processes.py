"""Writers killed between files, concurrent writers of one path, Core AI's integer cumsum
that wraps around: each leaves the previous whole, the new whole, or JAX's values."""
import json
import os
import shutil
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rely_common import FORMATS, has_coreai
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
from rlxjax import atomic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = r"""
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[3], "tests", "reliability"))
from rely_common import P, X, Y, make_step
from rlxjax import atomic
folder, fmt = sys.argv[1], sys.argv[2]
step = make_step(fmt, "mlstate")
st, _ = step(step.init(P, X, Y), X, Y)
step.export_state(st, folder + ".good")       # what the folder holds before the kill
step.export_state(st, folder)
st, _ = step(st, X, Y)
real, written = atomic.write_bytes, []

def stall_after_first(path, data):
    real(path, data)
    written.append(path)
    if len(written) == 1:                     # one state file of the new export is on disk
        print("WRITING", flush=True)
        time.sleep(600)                       # the parent kills us here

atomic.write_bytes = stall_after_first
step.export_state(st, folder)
print("NOT KILLED", flush=True)
"""


@pytest.mark.parametrize("fmt", [FORMATS[0], pytest.param(
    "aimodel", marks=[pytest.mark.slow, pytest.mark.skipif(not has_coreai(), reason="coreai")])])
def test_export_state_killed_between_files_leaves_the_previous_export(tmp_path, fmt):
    folder = str(tmp_path / "state")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, folder, fmt, ROOT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        line = proc.stdout.readline()
        if "WRITING" not in line:
            pytest.fail(f"child said {line!r}: {proc.stderr.read()[-3000:]}")
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    good = folder + ".good"
    assert sorted(os.listdir(folder)) == sorted(os.listdir(good))
    for name in os.listdir(good):  # the previous export, byte for byte: no mix of two
        assert open(os.path.join(good, name), "rb").read() == \
            open(os.path.join(folder, name), "rb").read(), name
    assert json.load(open(os.path.join(folder, "state.json")))["step"] == 1
    shutil.rmtree(good)


def test_concurrent_saves_of_one_package_path_all_succeed(tmp_path):
    """Writers racing to create one package path (the rename that finds the path just
    created by another exchanges with it): no raw OSError, one whole package stays."""
    path = str(tmp_path / "x.aimodel")
    errors, n = [], 8
    start, staged = threading.Barrier(n), threading.Barrier(n)

    def writer(i):
        def write(p):
            os.mkdir(p)
            with open(os.path.join(p, "who"), "w") as f:
                f.write(str(i))
            staged.wait()  # every writer has its folder staged: now all rename at once
        for _ in range(10):
            if start.wait() == 0:
                shutil.rmtree(path, ignore_errors=True)
            start.wait()
            try:
                atomic.write_package(path, ".aimodel", "Core AI", write)
            except Exception as e:  # noqa: BLE001 - what the test counts
                errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert os.listdir(path) == ["who"] and int(open(os.path.join(path, "who")).read()) < n
    assert os.listdir(tmp_path) == ["x.aimodel"]  # no staging folder, no '.old-' left


@pytest.mark.slow
@pytest.mark.skipif(not has_coreai(), reason="format='aimodel' needs coreai-core")
def test_concurrent_saves_of_a_real_aimodel_from_processes(tmp_path):
    code = r"""
import sys, numpy as np, rlxjax
f = rlxjax.coreml_jit(lambda x: x * float(sys.argv[2]), format="aimodel")
c = f.lower(np.ones(3, np.float32)).compile()
for _ in range(15):
    c.save(sys.argv[1])
"""
    path = str(tmp_path / "m.aimodel")
    procs = [subprocess.Popen([sys.executable, "-c", code, path, str(i)],
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT)) for i in range(6)]
    errs = [p.communicate()[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    got = rlxjax.load(path)(x=np.ones(3, np.float32))["out"]
    assert got[0] in range(6) and np.all(got == got[0])


# -- Core AI: an int32 cumsum that wraps around ----------------------------------------------
@pytest.mark.skipif(not has_coreai(), reason="format='aimodel' needs coreai-core")
@settings(max_examples=3, deadline=None)
@given(shape=st.sampled_from([(5,), (3, 4), (2, 3, 4)]), reverse=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_coreai_int32_cumsum_wraps_as_jax(shape, reverse, seed):
    x = np.random.default_rng(seed).integers(-2 ** 31, 2 ** 31 - 1, shape, dtype=np.int32)
    axis = seed % len(shape)
    f = lambda a: jax.lax.cumsum(a, axis=axis, reverse=reverse)  # noqa: E731
    want = np.asarray(jax.jit(f)(x))
    got = rlxjax.coreml_jit(f, format="aimodel")(x)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.skipif(not has_coreai(), reason="format='aimodel' needs coreai-core")
def test_coreai_long_int32_cumsum_is_refused_by_name():
    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="cumsum"):
        rlxjax.coreml_jit(jnp.cumsum, format="aimodel").lower(np.ones(5000, np.int32)).compile()
