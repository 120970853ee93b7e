"""``Layout.per_leaf`` (Core AI's plain states): one state per leaf, no packed vector."""
from __future__ import annotations

import jax
import numpy as np

from rlxjax.states.mlstate import CODECS, chunks, host_pack, host_unpack, make_layout, pack, unpack


def _layout():
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in
               [((3, 4), np.float32), ((0,), np.float32), ((4,), np.float32), ((), np.int32),
                ((2, 2), np.float32)]]
    names = ["params.a", "params.empty", "params.b", "opt_state.count", "opt_state.mu"]
    roles = ["param", "param", "param", "opt_state", "opt_state"]
    return make_layout(names, roles, structs, CODECS["plain"], per_leaf=True), structs


def _leaves(structs, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(s.dtype) if s.dtype == np.float32 else
            np.asarray(7, np.int32) for s in structs]


def test_each_non_empty_leaf_has_its_own_state():
    layout, _ = _layout()
    rows = layout.state_rows()
    assert [(n, length) for n, _, length, _, _ in rows] == [
        ("state.f32.0.value", 12), ("state.f32.1.value", 4), ("state.f32.2.value", 4),
        ("state.i32.0.value", 1)]
    # each in its leaf's shape, but params.a's (it shares its state with the zero-size
    # leaf: a vector) and the rank-0 count's (Core AI states have rank >= 1)
    assert layout.state_shapes() == [(12,), (4,), (2, 2), (1,)]
    # the zero-size leaf rides with its neighbour's chunk
    assert [[s.name for s, _, _ in c] for c in chunks(layout, "float32")] == [
        ["params.a", "params.empty"], ["params.b"], ["opt_state.mu"]]


def test_host_and_traced_packing_round_trip_the_leaves():
    layout, structs = _layout()
    leaves = _leaves(structs)
    pieces = host_pack(layout, leaves)
    back = host_unpack(layout, pieces)
    for a, b in zip(leaves, back):
        assert a.shape == b.shape and np.array_equal(a, b)
    order = [n for n, _, _, _ in layout.state_types()]
    traced = pack(layout, *leaves)   # the program's packing, run by JAX
    for name, p in zip(order, traced):
        assert np.asarray(p).shape == pieces[name].shape
        assert np.array_equal(np.asarray(p), pieces[name])
    for a, b in zip(leaves, unpack(layout, *[pieces[n] for n in order])):
        assert np.array_equal(a, np.asarray(b))
