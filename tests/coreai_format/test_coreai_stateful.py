"""Stateful functions (coreml_jit(fn, state=...), docs/stateful.md) on the Core AI format:
its states hold fp32 / int32 as they are (the "plain" codec), one state per leaf, so the KV
cache needs no codec; a prefill + decode package generates what JAX's decode loop generates."""
import os
import sys

import jax
import numpy as np
import pytest

import rlxjax

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "api"))

from test_stateful import STATE, W, X, accumulate  # noqa: E402


def test_a_stateful_function_keeps_its_leaves_in_plain_core_ai_states():
    c = rlxjax.coreml_jit(accumulate, state="state", format="aimodel").lower(
        W, STATE, X).compile()
    # one state per leaf (the plain codec): a call writes the leaves, no packed vector
    assert sorted(c.executable.state_graph_names) == ["state.f32.0.value", "state.i32.0.value"]
    s = c.make_state(STATE)
    want_state = STATE
    for k in range(3):
        want, want_state = jax.jit(accumulate)(W, want_state, X * (k + 1))
        np.testing.assert_array_equal(c(W, X * (k + 1), state=s), want)
    got = s.read()
    np.testing.assert_array_equal(got["total"], want_state["total"])
    assert int(got["count"]) == 3


@pytest.mark.slow
def test_a_prefill_decode_aimodel_generates_as_jax(tmp_path):
    from models import KVLM, kv_lm_decode, kv_lm_init, kv_lm_prefill

    model, dec = KVLM(), KVLM(decode=True)
    params, cache = kv_lm_init(model, dec)
    tok, prompt = np.zeros((1, 1), np.int32), np.array([[3, 7, 1, 4]], np.int32)
    kw = dict(state=0, format="aimodel")
    pc = rlxjax.coreml_jit(lambda c, prompt: kv_lm_prefill(dec, params, c, prompt), **kw)
    dc = rlxjax.coreml_jit(lambda c, tok: kv_lm_decode(dec, params, c, tok), **kw)
    path = rlxjax.save_functions(tmp_path / "lm.aimodel", {
        "prefill": pc.lower(cache, prompt).compile(), "decode": dc.lower(cache, tok).compile()})
    m = rlxjax.load(path, flat=True)
    p, d = m.function("prefill"), m.function("decode")
    assert d.input_names == ("tok",) and d.output_names == ("out",)
    st = m.make_state()
    logits, jl = p(prompt, state=st)["out"], None
    jl, jc = jax.jit(lambda c, q: kv_lm_prefill(dec, params, c, q))(cache, prompt)
    for _ in range(16):
        t, jt = np.argmax(logits, -1).astype(np.int32), np.argmax(jl, -1).astype(np.int32)
        assert int(t[0]) == int(jt[0])
        np.testing.assert_allclose(logits, jl, rtol=0, atol=1e-5)
        logits = d(t[:, None], state=st)["out"]
        jl, jc = jax.jit(lambda c, t: kv_lm_decode(dec, params, c, t))(jc, jt[:, None])
