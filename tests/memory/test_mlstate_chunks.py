"""``state="mlstate"``: the codec runs chunk by chunk (states/mlstate.py ``CHUNK``), which
must change no bit (the io-mode step on the same backend is the reference) and must keep the
codec's temporaries a chunk's size."""
from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from hypothesis import example, given, settings, strategies as st

import rlxjax
from rlxjax.states import mlstate as M
from helpers import bits as _bits, mlp_workload as _mlp


def _step(chunk, monkeypatch, **kw):
    monkeypatch.setattr(M, "CHUNK", chunk)
    loss, params, batch = _mlp()
    step = rlxjax.coreml_train_step(loss, optax.adamw(1e-2), state="mlstate",
                                    backend="reference", **kw)
    return step, step.init(params, *batch), params, batch, loss


def _cut(names, roles, shapes, chunk):
    structs = [jax.ShapeDtypeStruct(s, np.float32) for s in shapes]
    layout = M.make_layout(names, roles, structs)
    saved = M.CHUNK, M.MIN_PIECE
    try:
        M.CHUNK, M.MIN_PIECE = chunk, 1
        return [[(s.name, a, b) for s, a, b in c] for c in M.chunks(layout, "float32")]
    finally:
        M.CHUNK, M.MIN_PIECE = saved


def test_chunks_cover_the_layout_in_order():
    got = _cut(["a", "b", "c", "d"], ["param", "param", "opt_state", "opt_state"],
               [(3, 5), (40,), (2,), (7, 7)], 32)
    # at most CHUNK elements a chunk, never params with optimizer state; a leaf larger
    # than a chunk in pieces of a quarter chunk (8), of whole rows where a row fits (d)
    assert got == [[("a", 0, 15)], [("b", 0, 8)], [("b", 8, 16)], [("b", 16, 24)],
                   [("b", 24, 32)], [("b", 32, 40)], [("c", 0, 2)]] + \
        [[("d", lo, lo + 7)] for lo in range(0, 49, 7)]


def test_chunks_follow_the_pytree():
    """Leaves of one subtree that fits share a chunk; the end of block 1 never shares one
    with the start of block 10 (alphabetical order puts them side by side, their gradients
    are ready far apart); subtrees of under an eighth of a chunk go together."""
    names = ["p.h_1.a", "p.h_1.b", "p.h_10.a", "p.h_10.b", "p.ln.a", "p.ln.b", "p.wte"]
    got = _cut(names, ["param"] * 7, [(6,), (6,), (6,), (6,), (1,), (1,), (40,)], 32)
    assert got == [[("p.h_1.a", 0, 6), ("p.h_1.b", 0, 6)],
                   [("p.h_10.a", 0, 6), ("p.h_10.b", 0, 6)],
                   [("p.ln.a", 0, 1), ("p.ln.b", 0, 1)]] + \
        [[("p.wte", lo, lo + 8)] for lo in range(0, 40, 8)]
    # a subtree larger than a chunk splits one level deeper
    got = _cut(["p.h.a", "p.h.b", "p.h.c"], ["param"] * 3, [(9,), (9,), (3,)], 16)
    assert got == [[("p.h.a", 0, 9)], [("p.h.b", 0, 9)], [("p.h.c", 0, 3)]]


@pytest.mark.parametrize("chunk", [pytest.param(5, marks=pytest.mark.slow),
                                   pytest.param(24, marks=pytest.mark.slow), 100])
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
    small, *_ = _step(100, monkeypatch, target="iOS18")
    a, b = whole.memory_analysis(), small.memory_analysis()
    assert a.state_size_in_bytes == b.state_size_in_bytes
    assert b.temp_size_in_bytes < a.temp_size_in_bytes


def test_each_chunk_is_its_own_states_written_when_encoded(monkeypatch, tmp_path):
    """A packed vector longer than a chunk has one set of states per chunk: the metadata
    says where each lives, the memory order writes a chunk as soon as it is encoded, the
    analysis is the interpreter's measured peak, and a saved package runs from
    ``export_state``'s files (what an app does)."""
    import json
    import os

    from test_memory_analysis import assert_agrees, measured

    # 708 parameters and 2 x 708 adamw moments, one set of fp32 states per subtree (Dense_0's
    # bias, its 16 x 32 kernel in pieces of 12 rows - a chunk, as pieces are at least
    # MIN_PIECE -, Dense_1, LayerNorm_0) and role: 5 + 10 sets
    step, st, params, batch, loss = _step(400, monkeypatch, target="iOS18")
    c = step.last_compiled
    meta = json.loads(c.spec.description.metadata.userDefined["rlxjax.train"])
    n_f32 = sum(np.size(x) for x in jax.tree_util.tree_leaves(
        (params, optax.adamw(1e-2).init(params))) if np.asarray(x).dtype == np.float32)
    assert meta["state_chunk"] == 400
    exp = [r for r in meta["states"] if r["role"] == "f32_exp"]
    sizes = [r["shape"][0] for r in exp]
    assert len(exp) == 15 and max(sizes) <= 400 and sum(sizes) == n_f32
    assert [r["offset"] for r in exp] == [sum(sizes[:k]) for k in range(len(exp))]
    assert [r["name"] for r in exp] == [f"state_f32_{k}_exp" for k in range(len(exp))]
    assert {f.name for f in c.spec.description.state} == {r["name"] for r in meta["states"]}
    # written as soon as encoded: the first write comes before some other op
    types = [op.type for op in c.mil_ops() if op.type != "const"]
    assert types.count("write_state") == len(meta["states"])
    assert set(types[types.index("write_state"):]) != {"write_state"}
    assert_agrees(step.memory_analysis(), measured(c, *batch, state=True))
    # the host side: the device state holds the parameters exactly
    for a, b in zip(jax.tree_util.tree_leaves(step.params(st)),
                    jax.tree_util.tree_leaves(params)):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    folder = step.export_state(st, tmp_path / "init_state")
    model = rlxjax.load(step.save(tmp_path / "train.mlpackage"), backend="reference", flat=True)
    device = model.make_state()
    for name in model.state_names:
        raw = np.fromfile(os.path.join(folder, name + ".f16"), "<f2")
        device.write_state(name, raw.reshape(device.read_state(name).shape))
    np.testing.assert_allclose(model(*batch, state=device)["out"], float(loss(params, *batch)),
                               rtol=1e-5)
    st2, lv = step(st, *batch)   # the package's second call: the step's own second loss
    np.testing.assert_array_equal(_bits(np.float32(model(*batch, state=device)["out"])),
                                  _bits(np.float32(step(st2, *batch)[1])))


def _chunked_case(sizes, chunk, seed):
    rng = np.random.default_rng(seed)
    roles = ["param"] * ((len(sizes) + 1) // 2) + ["opt_state"] * (len(sizes) // 2)
    structs = [jax.ShapeDtypeStruct((n,), np.float32) for n in sizes] + \
        [jax.ShapeDtypeStruct((), np.int32)]
    layout = M.make_layout([f"l{i}" for i in range(len(structs))], roles + ["opt_state"],
                           structs, chunk=chunk)
    leaves = [(rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
              for n in sizes] + [np.int32(rng.integers(-2 ** 31, 2 ** 31 - 1))]
    return layout, leaves


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=5), st.integers(1, 30),
       st.integers(0, 2 ** 31 - 1))
@example([1, 1], 2, 0)  # one set of states holding two chunks (CI's oldest-JAX run drew it)
def test_chunk_states_round_trip_on_the_host(sizes, chunk, seed):
    """Any leaf sizes and chunk: the per-chunk states host_pack writes (one set per chunk,
    at most ``chunk`` values each) decode (host_unpack) to the leaves bit for bit."""
    layout, leaves = _chunked_case(sizes, chunk, seed)
    sets = layout.state_sets("float32")
    if len(sets) == 1:  # the whole vector fits one chunk: one set, its chunks sliced out
        assert (sets[0][1], sets[0][2]) == (0, layout.length("float32")) <= (0, chunk)
    else:               # one set per chunk (chunks also end where the leaves' role changes)
        assert [hi - lo for _, lo, hi in sets] == [
            sum(b - a for _, a, b in c) for c in M.chunks(layout, "float32")]
        assert all(hi - lo <= chunk for _, lo, hi in sets)
    pieces = M.host_pack(layout, leaves)
    assert list(pieces) == [n for n, _, _, _ in layout.state_types()]
    for a, b in zip(M.host_unpack(layout, pieces), leaves):
        np.testing.assert_array_equal(_bits(np.asarray(a).reshape(-1)),
                                      _bits(np.asarray(b).reshape(-1)))


def test_traced_chunk_states_are_the_host_pieces():
    """The traced pack writes the pieces host_pack writes, unpack reads the leaves back."""
    layout, leaves = _chunked_case([7, 30, 3, 12], 8, 0)
    assert len(layout.state_sets("float32")) > 2
    names = [n for n, _, _, _ in layout.state_types()]
    pieces = M.host_pack(layout, leaves)
    traced = jax.jit(lambda *xs: M.pack(layout, *xs))(*leaves)
    for a, n in zip(traced, names):
        np.testing.assert_array_equal(_bits(a), _bits(pieces[n]))
    back = jax.jit(lambda *ps: M.unpack(layout, *ps))(*[pieces[n] for n in names])
    for a, b in zip(back, leaves):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint32),
                                      np.asarray(b).view(np.uint32))
