"""The Core AI worker process (rlxjax/coreai/worker.py, serve.py, shm.py) under faults: a call
interrupted by Ctrl-C (small and big arrays), a call past its deadline, a worker killed in the
middle of a training step, a parent killed with its worker alive. After each, the next call
returns JAX's result, a state-resident training step keeps its last completed step, and no
shared-memory file of the session is left behind. The heavier fault injection is under
``-m slow``."""
import glob
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import jax_loop
from rlxjax.coreai import shm

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
optax = pytest.importorskip("optax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the worktree, tests/ (helpers.py) and this folder, for the scripts run in a fresh Python
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [ROOT, os.path.join(ROOT, "tests"), os.path.dirname(os.path.abspath(__file__))]))


def f(x):
    return jnp.sin(x) * 2.0 + x


def _files(prefix, kind=""):
    return glob.glob(os.path.join(shm.folder(), glob.escape(prefix + kind) + "*"))


def _script(body: str, timeout=600) -> str:
    """Run ``body`` in a fresh Python (an interrupt or a kill must not reach pytest)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=timeout, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# -- the snapshot of a worker's states (no runtime needed) --------------------------------
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.booleans(), st.booleans()),
                min_size=1, max_size=12))
def test_a_snapshot_gives_the_last_acknowledged_value_whatever_was_cut_short(events):
    """Each event changes one state ("a", "b") or both (None, a call) at a fresh version;
    ``acked`` says whether the writer saw it complete, ``torn`` cuts a copy short (a death
    mid-copy: version left -1). Reads give the last acknowledged values, as WorkerState and
    the worker keep them."""
    path = os.path.join(shm.folder(), shm.new_prefix() + "state-test")
    snap = shm.Snapshot(path, [("a", (3,), "float32"), ("b", (2,), "int32")], create=True)
    try:
        want = {"a": np.zeros(3, np.float32), "b": np.zeros(2, np.int32)}
        acked = {}
        for k, v in want.items():
            snap.write(k, v, 0, -1)
            acked[k] = 0
        for i, (name, ok, torn) in enumerate(events):
            version = i + 1
            names = ["a", "b"] if name is None else [name]
            new = {k: np.full(want[k].shape, version, want[k].dtype) for k in names}
            for k in names:
                snap.write(k, new[k], version, acked[k])
                if torn:
                    a, b = snap.slots[k]
                    snap._version(a if snap._version(a)[0] == version else b)[0] = -1
                    break
            if ok and not torn:
                want.update(new)
                acked.update(dict.fromkeys(names, version))
            for k in want:
                np.testing.assert_array_equal(snap.read(k, acked[k]), want[k])
    finally:
        snap.close()
        shm.remove(path)


# -- interrupted calls, deadlines, killed workers -----------------------------------------
INTERRUPT = """
    import signal, sys, numpy as np, jax, jax.numpy as jnp, rlxjax
    def f(x):
        return jnp.sin(x) * 2.0 + x
    x = np.linspace(-3, 3, N, dtype=np.float32)
    c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
    c(x)
    def interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, interrupt)
    hit = 0
    for i, delay in enumerate(DELAYS):
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                c(x + i)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            hit += 1
        b = x * (i + 2)   # another input: its result, never the interrupted call's
        np.testing.assert_allclose(c(b), jax.jit(f)(b), rtol=1e-5, atol=1e-5)
    print("interrupted", hit)
"""


@pytest.mark.parametrize("n, delays", [
    (1 << 20, [0.002, 0.03]),   # 4 MiB in and out
    pytest.param(1 << 22, [0.0005, 0.005, 0.03, 0.1, 0.3], marks=pytest.mark.slow),
])
def test_a_call_interrupted_by_ctrl_c_leaves_the_next_call_right(n, delays):
    out = _script(INTERRUPT.replace("N,", f"{n},").replace("DELAYS", repr(delays)))
    assert int(out.split()[-1]) >= 1, out  # at least one call was really cut short


def test_a_call_past_its_deadline_is_an_error_naming_the_function_and_the_next_is_right():
    from rlxjax.coreai import worker
    from rlxjax.coreai.worker import CoreAIRuntimeError

    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32)
    c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
    c(x)
    before = worker.TIMEOUT
    try:
        worker.set_timeout(0.001)
        with pytest.raises(CoreAIRuntimeError, match=r"did not finish main of .* within"):
            c(x)
    finally:
        worker.set_timeout(before)
    np.testing.assert_allclose(c(x * 2), jax.jit(f)(x * 2), rtol=1e-5, atol=1e-5)
    with pytest.raises(rlxjax.RlxError, match="positive"):
        worker.set_timeout(0)


def predict(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def loss(p, x, y):
    return jnp.mean((predict(p, x) - y) ** 2)


_rng = np.random.default_rng(3)
P = {"w1": (_rng.standard_normal((6, 8)) * 0.5).astype(np.float32),
     "b1": np.zeros(8, np.float32), "w2": (_rng.standard_normal((8, 2)) * 0.5).astype(np.float32)}
X = _rng.standard_normal((16, 6)).astype(np.float32)
Y = _rng.standard_normal((16, 2)).astype(np.float32)


def _kill_during_next_call(session):
    """Stop the worker, so the next request waits, and kill it while it does: the death
    falls inside that call, deterministically."""
    pid = session.proc.pid
    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    timer.start()
    return timer


def test_a_worker_killed_in_a_state_step_keeps_the_last_completed_step():
    from rlxjax.coreai.worker import CoreAIRuntimeError

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format="aimodel")
    state = step.init(P, X, Y)
    for _ in range(2):
        state, _ = step(state, X, Y)
    session = state.device.handle.session
    timer = _kill_during_next_call(session)
    with pytest.raises(CoreAIRuntimeError, match="died with SIGKILL"):
        step(state, X, Y)
    timer.join()
    assert not _files(session.prefix, "out")  # the dead worker's arenas are removed
    want2, _ = jax_loop(loss, opt, P, (X, Y), 2)
    assert state.step == 2
    for k in P:  # the TrainState passed in still holds step 2, read from the mirror
        np.testing.assert_allclose(state.params[k], want2[k], rtol=1e-5, atol=1e-6)
    assert int(state.opt_state[0].count) == 2
    losses = []
    for _ in range(3):  # and training goes on from it, in a new worker
        state, v = step(state, X, Y)
        losses.append(float(v))
    want5, want_losses = jax_loop(loss, opt, P, (X, Y), 5)
    np.testing.assert_allclose(losses, want_losses[2:], rtol=1e-4)
    for k in P:
        np.testing.assert_allclose(state.params[k], want5[k], rtol=1e-4, atol=1e-5)
    assert state.step == 5 and int(state.opt_state[0].count) == 5


def test_big_results_kept_alive_stay_right_while_later_calls_run():
    """Outputs of 1 MiB or more map their own file (shm.Leases), reused once the result is
    gone: a result still held must never be written by a later call."""
    from rlxjax.coreai.worker import Session

    x = np.linspace(-2, 2, 1 << 18, dtype=np.float32)  # 1 MiB: shm.BIG
    c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
    s = Session(c.executable.asset())
    kept = [s("main", {"x": x + i})["out"] for i in range(3)]
    for i in range(4):  # results dropped as they come: their files are reused
        got = s("main", {"x": x * (i + 1)})["out"]
        np.testing.assert_allclose(got, jax.jit(f)(x * (i + 1)), rtol=1e-5, atol=1e-5)
    for i, k in enumerate(kept):
        np.testing.assert_allclose(k, jax.jit(f)(x + i), rtol=1e-5, atol=1e-5)
    assert len(_files(s.prefix, "out")) <= 3 + 2 + 1 + shm.Leases.KEEP
    s.close()
    assert not _files(s.prefix)
    np.testing.assert_allclose(kept[0], jax.jit(f)(x), rtol=1e-5, atol=1e-5)  # still mapped


def test_a_closed_session_leaves_no_shared_memory():
    from rlxjax.coreai.worker import Session

    x = np.arange(10, dtype=np.float32)
    c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
    path = c.executable.asset()
    s = Session(path)
    st_ = s.new_state({})
    np.testing.assert_allclose(s("main", {"x": x})["out"], jax.jit(f)(x), rtol=1e-6)
    assert _files(s.prefix)
    del st_
    s.close()
    assert not _files(s.prefix)


# -- the heavier fault injection ----------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_in_a_state_step_keeps_the_last_completed_step_and_trains_on():
    out = _script("""
        import signal, numpy as np, jax, optax, rlxjax
        from helpers import jax_loop
        from test_coreai_worker import P, X, Y, loss
        opt = optax.adam(1e-2)
        step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format="aimodel")
        state = step.init(P, X, Y)
        def interrupt(*_):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        done = 0
        for delay in [0.0002, 0.002, 0.02, 0.2, 1, 8, 8, 0.001, 0.05, 8]:
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, delay)
                    new, _ = step(state, X, Y)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                state, done = new, done + 1
            except KeyboardInterrupt:
                pass
            want, _ = jax_loop(loss, opt, P, (X, Y), done)
            assert state.step == done
            for k in P:
                np.testing.assert_allclose(state.params[k], want[k], rtol=1e-4, atol=1e-5)
        print("completed", done)
    """)
    assert 0 < int(out.split()[-1]) < 10, out  # some steps were cut short, some completed


@pytest.mark.slow
def test_a_killed_rlxjax_process_leaves_no_shared_memory():
    script = textwrap.dedent("""
        import os, signal, numpy as np, rlxjax
        from test_coreai_worker import f
        x = np.arange(1 << 20, dtype=np.float32)
        c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
        c(x)
        session = c._get_backend().session
        state = session.new_state({"s": np.ones(5, np.float32)})
        print(session.prefix, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=ENV)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    prefix = proc.stdout.split()[-1]
    for _ in range(100):  # the orphaned worker sees its request pipe close and cleans up
        if not _files(prefix):
            break
        time.sleep(0.1)
    assert not _files(prefix), _files(prefix)
