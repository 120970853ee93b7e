"""Arrays through the Core AI worker (rlxjax/coreai/rt_arrays.py, serve.py, shm.py): every
input dtype rlxjax feeds is filled into the runtime's own array in place and every output
read in place (coreai-core's own constructor and ``.numpy()`` copy at a few hundred MB/s),
and still: each call computes on its own inputs, a result never changes under the user
after later calls (small results copied out, big ones in their own file), and a worker
killed in the middle of a call is an error while the next call is right. Expected values
are JAX's."""
import os
import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from test_coreai_worker import _script

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")


def g(a, h, i, b, u):
    return a * 2.0 + 1.0, h * 2 + 1, i * 3 - 1, jnp.logical_not(b), u + 1, a, i


def _args(k):
    return (np.arange(6, dtype=np.float32).reshape(2, 3) * (k + 1),
            (np.arange(4) + k).astype(np.float16), np.arange(5, dtype=np.int32) - k,
            np.array([True, False, k % 2 == 0]), (np.arange(3) + 7 * k).astype(np.uint8))


def _check(got, k):
    want = jax.jit(g)(*_args(k))
    for o, w in zip(got, want):
        assert o.dtype == np.asarray(w).dtype and o.shape == w.shape
        np.testing.assert_array_equal(o, w)


def test_every_dtype_computes_on_its_own_inputs_and_results_never_change_later():
    c = rlxjax.coreml_jit(g, format="aimodel").lower(*_args(0)).compile()
    kept = [c(*_args(k)) for k in range(3)]   # outputs that echo an input (a, i) included
    for k, got in enumerate(kept):
        _check(got, k)
    for k in range(3, 6):   # later calls refill the same runtime inputs in the worker
        _check(c(*_args(k)), k)
    for k, got in enumerate(kept):  # held results: unchanged by the later calls
        _check(got, k)


def test_inputs_and_outputs_take_the_in_place_path_for_every_dtype_fed(tmp_path, monkeypatch):
    """The worker's fast path is taken (not coreai-core's copying fallback) for the feeds
    rlxjax sends (as the worker gets them: captured from the session) and reads back
    exactly what .numpy() reads; run in a fresh Python, as the worker runs the runtime
    (never in the user's process)."""
    from rlxjax.coreai import worker

    c = rlxjax.coreml_jit(g, format="aimodel").lower(*_args(0)).compile()
    feeds, call = [], worker.Session.__call__
    monkeypatch.setattr(worker.Session, "__call__",
                        lambda self, fn, fd, state=None: feeds.append(fd) or call(self, fn, fd))
    for k in range(2):
        c(*_args(k))
    for k, fd in enumerate(feeds):
        np.savez(tmp_path / f"feeds{k}.npz", **fd)
    out = _script(f"""
        import asyncio
        import numpy as np
        from coreai.runtime import NDArray
        from rlxjax.coreai import ca_private, rt_arrays

        async def main():
            async with ca_private.executable({c.executable.asset()!r}) as model:
                fn = model.load_function("main")
                feed = rt_arrays.Inputs(fn)
                for k in range(2):
                    args = dict(np.load({str(tmp_path)!r} + f"/feeds{{k}}.npz"))
                    rt = {{n: feed(n, a) for n, a in args.items()}}
                    assert sorted(feed.slots) == sorted(args), sorted(feed.slots)
                    want = await fn({{n: NDArray(a) for n, a in args.items()}})
                    got = await fn(rt)
                    for n, v in got.items():
                        view = rt_arrays.host_view(v)
                        assert view is not None, (n, v.dtype)
                        assert view.tobytes() == want[n].numpy().tobytes(), n
                        assert not view.flags.writeable
            print("ok")

        asyncio.run(main())
        """)
    assert out.strip().endswith("ok")


def test_big_arrays_cross_both_ways_and_a_worker_killed_mid_call_is_an_error():
    from rlxjax.coreai.worker import CoreAIRuntimeError, Session

    def f(x):
        return jnp.sin(x) * 2.0 + x

    x = np.linspace(-3, 3, 3 << 18, dtype=np.float32)  # 3 MiB in, 3 MiB out
    c = rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()
    s = Session(c.executable.asset())
    np.testing.assert_allclose(s("main", {"x": x})["out"], jax.jit(f)(x), rtol=1e-5,
                               atol=1e-5)
    pid = s.proc.pid
    os.kill(pid, signal.SIGSTOP)   # the next call waits on a stopped worker, killed there
    timer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    timer.start()
    with pytest.raises(CoreAIRuntimeError, match="died with SIGKILL"):
        s("main", {"x": x * 2})
    timer.join()
    for k in (3, 4):   # a new worker, new runtime input arrays: each call on its own input
        np.testing.assert_allclose(s("main", {"x": x * k})["out"], jax.jit(f)(x * k),
                                   rtol=1e-5, atol=1e-5)
    s.close()
