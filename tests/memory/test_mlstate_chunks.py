"""``state="mlstate"``: the codec runs chunk by chunk (training/mlstate.py ``CHUNK``), which
must change no bit (the io-mode step on the same backend is the reference) and must keep the
codec's temporaries a chunk's size."""
from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax.training import mlstate as M
from helpers import bits as _bits, mlp_workload as _mlp


def _step(chunk, monkeypatch, **kw):
    monkeypatch.setattr(M, "CHUNK", chunk)
    loss, params, batch = _mlp()
    step = rlxjax.coreml_train_step(loss, optax.adamw(1e-2), state="mlstate",
                                    backend="reference", **kw)
    return step, step.init(params, *batch), params, batch, loss


def test_chunks_cover_the_layout_in_order():
    structs = [jax.ShapeDtypeStruct(s, np.float32) for s in [(3, 5), (40,), (2,), (7, 7)]]
    layout = M.make_layout(["a", "b", "c", "d"], ["param", "param", "opt_state", "opt_state"],
                           structs)
    saved = M.CHUNK
    try:
        M.CHUNK = 16
        got = [[(s.name, a, b) for s, a, b in c] for c in M.chunks(layout, "float32")]
    finally:
        M.CHUNK = saved
    # at most CHUNK elements a chunk, a big leaf cut, never params with optimizer state
    assert got == [[("a", 0, 15), ("b", 0, 1)], [("b", 1, 17)], [("b", 17, 33)],
                   [("b", 33, 40)], [("c", 0, 2), ("d", 0, 14)], [("d", 14, 30)],
                   [("d", 30, 46)], [("d", 46, 49)]]


@pytest.mark.parametrize("chunk", [pytest.param(5, marks=pytest.mark.slow), 24])
def test_chunked_codec_is_the_io_step_bit_for_bit(chunk, monkeypatch):
    step, st, params, batch, loss = _step(chunk, monkeypatch)
    io = rlxjax.coreml_train_step(loss, optax.adamw(1e-2), backend="reference")
    io_st = io.init(params, *batch)
    for _ in range(3):
        st, lv = step(st, *batch)
        io_st, io_lv = io(io_st, *batch)
        assert float(lv) == float(io_lv)
    for a, b in zip(jax.tree_util.tree_leaves((st.params, st.opt_state)),
                    jax.tree_util.tree_leaves((io_st.params, io_st.opt_state))):
        np.testing.assert_array_equal(_bits(np.asarray(a)), _bits(np.asarray(b)))


def test_chunks_lower_the_codec_temporaries(monkeypatch):
    whole, *_ = _step(2 ** 30, monkeypatch, target="iOS18")
    small, *_ = _step(24, monkeypatch, target="iOS18")
    a, b = whole.memory_analysis(), small.memory_analysis()
    assert a.state_size_in_bytes == b.state_size_in_bytes
    assert b.temp_size_in_bytes < a.temp_size_in_bytes
