"""coreml_jit(fn, state=...) and rlxjax.save_functions on small functions: the state's
round trip, the call conventions, and every misuse refused with an rlxjax error.
(The flax LM that generates with its KV cache in state: tests/models/test_kv_cache.py.)"""
from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
from rlxjax.errors import ArgumentError, TargetError


def accumulate(w, state, x):
    """A running sum and a counter in state: out = w * (sum so far + x)."""
    total = state["total"] + x
    return w * total, {"total": total, "count": state["count"] + 1}


STATE = {"total": np.zeros((2, 3), np.float32), "count": np.zeros((), np.int32)}
W, X = np.float32(2.0), np.ones((2, 3), np.float32)


@functools.lru_cache(maxsize=None)
def _compiled(precision="exact"):
    return rlxjax.coreml_jit(accumulate, state="state", state_precision=precision).lower(
        W, STATE, X).compile()


def test_calls_update_the_state_in_place_as_jax_carries_it():
    c = _compiled()
    assert [s.mil_name for s in c.input_specs] == ["w", "x"]
    assert [s.mil_name for s in c.output_specs] == ["out"]
    st_ = c.make_state(STATE)
    want_state = STATE
    for k in range(3):
        x = X * (k + 1)
        want, want_state = jax.jit(accumulate)(W, want_state, x)
        np.testing.assert_array_equal(c(W, x, state=st_), want)
    got = st_.read()
    np.testing.assert_array_equal(got["total"], want_state["total"])
    assert got["count"] == 3 and got["count"].dtype == np.int32


def test_the_function_object_compiles_on_make_state_and_takes_state():
    f = rlxjax.coreml_jit(accumulate, state=1)
    st_ = f.make_state(W, STATE, X)
    np.testing.assert_array_equal(f(W, X, state=st_), W * X)
    np.testing.assert_array_equal(f(W, X, state=st_), 2 * W * X)
    with pytest.raises(ArgumentError, match="state=st"):
        f(W, STATE, X)


f32s = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
i32s = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=10, deadline=None)
@given(st.lists(f32s, min_size=6, max_size=6), i32s)
def test_exact_state_round_trips_every_fp32_and_int32_bit_for_bit(values, count):
    """Written, kept across a call that passes it through (x = 0) and read back: the bits
    JAX would carry (subnormals where the device keeps them, -0.0, the int32 range)."""
    c = _compiled()
    value = {"total": np.array(values, np.float32).reshape(2, 3),
             "count": np.array(count, np.int32)}
    s = c.make_state(value)
    assert s.read()["total"].tobytes() == value["total"].tobytes()
    c(W, np.zeros((2, 3), np.float32), state=s)      # total + 0 is total, bit for bit
    # (numpy: IEEE -0.0 + 0.0 = +0.0, which XLA's simplifier folds to x + 0 -> x)
    want_total = value["total"] + np.float32(0)
    assert s.read()["total"].tobytes() == want_total.tobytes()
    if count < 2**31 - 1:
        assert int(s.read()["count"]) == count + 1


def test_fp16_states_round_to_fp16():
    c = _compiled("fp16")
    assert c.state_names == ("state_f32_f16", "state_i32_hi", "state_i32_mid", "state_i32_lo")
    value = {"total": np.full((2, 3), 1 / 3, np.float32), "count": np.array(7, np.int32)}
    s = c.make_state(value)
    got = s.read()
    np.testing.assert_array_equal(got["total"], np.float32(np.float16(1 / 3)))
    assert int(got["count"]) == 7


def test_save_functions_shares_one_state(tmp_path):
    double = lambda w, state, x: accumulate(2 * w, state, x)  # noqa: E731
    a = _compiled()
    b = rlxjax.coreml_jit(double, state="state").lower(W, STATE, X).compile()
    m = rlxjax.load(rlxjax.save_functions(tmp_path / "two.mlpackage", {"a": a, "b": b}), flat=True)
    s = m.make_state()
    np.testing.assert_array_equal(m(w=W, x=X, state=s)["out"], W * X)
    np.testing.assert_array_equal(m.run("b", W, X, state=s)["out"], 2 * W * 2 * X)
    assert int(s.read()["state.count"]) == 2


def test_misuse_is_refused_clearly(tmp_path):
    with pytest.raises(ArgumentError, match="none of the function's arguments"):
        rlxjax.coreml_jit(accumulate, state="cache").lower(W, STATE, X)
    with pytest.raises(ArgumentError, match=r"returns \(out, new_state\)"):
        rlxjax.coreml_jit(lambda w, state, x: w * x, state="state").lower(W, STATE, X)
    with pytest.raises(ArgumentError, match="zero-size"):
        rlxjax.coreml_jit(lambda w, state, x: (w * x, state), state="state").lower(
            W, {"a": np.zeros(0, np.float32), "b": X}, X)
    with pytest.raises(ArgumentError, match="float32 and int32"):
        rlxjax.coreml_jit(accumulate, state="state").lower(
            W, {"total": np.zeros((2, 3), np.float16), "count": STATE["count"]}, X)
    with pytest.raises(ArgumentError, match="state_precision"):
        rlxjax.coreml_jit(accumulate, state="state", state_precision="bf16")
    with pytest.raises(TargetError, match="iOS18"):
        rlxjax.coreml_jit(accumulate, state="state", target="iOS17")
    c = _compiled()
    with pytest.raises(ArgumentError, match="state leaf 'state.total'"):
        c.make_state({"total": np.zeros((3, 2), np.float32), "count": STATE["count"]})
    other = rlxjax.coreml_jit(lambda w, s, x: (w * s["t"] + x, {"t": s["t"] + 1}),
                              state="s").lower(W, {"t": X}, X).compile()
    with pytest.raises(ArgumentError, match="declare different states"):
        rlxjax.save_functions(tmp_path / "bad.mlpackage", {"a": c, "b": other})


def test_a_saved_stateful_function_loads_with_its_state_by_leaf_name(tmp_path):
    m = rlxjax.load(_compiled().save(tmp_path / "acc.mlpackage"), flat=True)
    assert m.input_names == ("w", "x") and m.output_names == ("out",)
    s = m.make_state()
    s.write({"state.total": np.full((2, 3), 0.5, np.float32), "state.count": np.int32(4)})
    np.testing.assert_array_equal(m(W, X, state=s)["out"], W * (0.5 + X))
    got = s.read()
    np.testing.assert_array_equal(got["state.total"], 0.5 + X)
    assert int(got["state.count"]) == 5


def test_a_format_with_plain_states_gets_the_leaves_as_they_are(monkeypatch):
    """A format whose registry entry says state_codec="plain" (Core AI's fp32 / int32
    states): no codec, one state per leaf holding its values in its shape (a rank-0 leaf
    in a vector of one); what Program.states and the graph carry."""
    import dataclasses

    from rlxjax import formats

    entry = formats.REGISTRY["mlpackage"]
    monkeypatch.setitem(formats.REGISTRY, "mlpackage",
                        dataclasses.replace(entry, state_codec="plain"))
    lo = rlxjax.coreml_jit(accumulate, state="state").lower(W, STATE, X)
    assert lo.states == {"state.f32.0.value": "new.state.f32.0.value",
                         "state.i32.0.value": "new.state.i32.0.value"}
    types = {n: str(v.type) for n, v in lo.graph.inputs}
    assert types == {"state.f32.0.value": "f32[2,3]", "state.i32.0.value": "i32[1]",
                     "w": "f32[]", "x": "f32[2,3]"}
    value = {"total": np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3),
             "count": np.array(-2**31, np.int32)}
    pieces = lo.state_layout.pack(value)
    np.testing.assert_array_equal(pieces["state.f32.0.value"], value["total"])
    back = lo.state_layout.unpack(pieces)
    assert back["total"].tobytes() == value["total"].tobytes() and back["count"] == -2**31
