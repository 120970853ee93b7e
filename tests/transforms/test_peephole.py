"""Three program-shrinking rules (issue 16), each checked against JAX on the reference
backend and by the MIL op pattern it leaves, the program loaded by coremltools:

- slices of one value cutting one axis -> one MIL ``split`` (RLX ``split``: jnp.split in
  the frontend, transforms/merge_slices.py for hand-written slices);
- jnp.split's backward is a concatenate, with no ``+ 0.0`` (its VJP is JAX's);
- ``(x * a) * 2**k`` -> ``x * (a * 2**k)`` in fp32 (transforms/scalar_muls.py).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
from helpers import assert_tree_close, examples
from rlxjax.ir import DType, Graph, TensorType
from rlxjax.ir.builder import Builder
from rlxjax.transforms.scalar_muls import fold_scalar_muls

pytestmark = pytest.mark.reference_backend


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _program(fn, args, grad=False, precision="fp32"):
    wrap = rlxjax.coreml_grad if grad else rlxjax.coreml_jit
    c = wrap(fn, backend="reference", precision=precision).lower(*args).compile()
    ops = list(c.validate().functions["main"].operations)  # coremltools' loader
    return c, [op for op in ops if op.op_type != "const"]


def _types(ops):
    return [op.op_type for op in ops]


def _const_operand(op):
    """The scalar value of a constant operand of a binary op, else None."""
    for v in (op.x, op.y):
        if v.val is not None and np.size(v.val) == 1:
            return float(np.asarray(v.val).reshape(()))
    return None


def _zero_adds(ops):
    return [op for op in ops if op.op_type == "add" and _const_operand(op) == 0.0]


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


# -- 1. split ------------------------------------------------------------------------
@st.composite
def _split_case(draw):
    rank = draw(st.integers(1, 3))
    axis = draw(st.integers(0, rank - 1))
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=5))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    shape[axis] = sum(sizes)
    return tuple(shape), axis, sizes


@settings(max_examples=examples(5), deadline=None)
@given(_split_case(), st.booleans())
def test_jnp_split_is_one_mil_split_forward_and_backward(case, equal):
    shape, axis, sizes = case
    if equal:  # jnp.split(x, n): num_splits
        sizes = [sizes[0]] * len(sizes)
        shape = tuple(sum(sizes) if i == axis else d for i, d in enumerate(shape))
        cut = len(sizes)
    else:
        cut = list(np.cumsum(sizes)[:-1])
    w = [_x(*(n if i == axis else d for i, d in enumerate(shape)), seed=k)
         for k, n in enumerate(sizes)]

    def f(x):
        return sum(jnp.sum(jnp.sin(p) * wk) for p, wk in zip(jnp.split(x, cut, axis=axis), w))

    x = _x(*shape, seed=9)
    c, ops = _program(f, (x,))
    assert _types(ops).count("split") == 1 and "slice_by_index" not in _types(ops)
    assert_tree_close(c(x), f(x), rtol=1e-5, atol=1e-5)
    g, gops = _program(f, (x,), grad=True)
    assert _types(gops).count("split") == 1 and "slice_by_index" not in _types(gops)
    assert not _zero_adds(gops)
    assert_tree_close(g(x), jax.grad(f)(x), rtol=1e-5, atol=1e-5)


def test_split_backward_keeps_negative_zero_as_jax_does():
    # JAX's transpose of split is a concatenate: a -0.0 cotangent stays -0.0 (a sum of
    # zero pads, the VJP of slices, would make it +0.0): no + 0.0 is added.
    a = np.array([-0.0, 1.0, -0.0], np.float32)

    def f(x):
        p, q = jnp.split(x, 2)
        return jnp.sum(jnp.sin(p) * a) + jnp.sum(jnp.sin(q) * a)

    x = np.ones(6, np.float32)
    g, ops = _program(f, (x,), grad=True)
    want = jax.grad(f)(x)
    assert np.signbit(want).any()
    np.testing.assert_array_equal(_bits(g(x)), _bits(np.asarray(want)))
    assert not _zero_adds(ops) and "concat" in _types(ops)


@pytest.mark.slow  # 10 s; the hypothesis tests above check the same pattern by default
def test_dit_block_gradient_has_one_split_and_no_zero_add():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import vs_peer
    _, _, loss, args = vs_peer.WORKLOADS["dit block d128"]()
    c = rlxjax.coreml_grad(loss, target="iOS18", backend="reference").lower(*args).compile()
    ops = [op for op in c.validate().functions["main"].operations if op.op_type != "const"]
    assert _types(ops).count("split") == 1 and "slice_by_index" not in _types(ops)
    assert not _zero_adds(ops)
    assert_tree_close(c(*args), jax.grad(loss)(*args), rtol=2e-4, atol=2e-5)


@settings(max_examples=examples(8), deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=5), st.data())
def test_hand_written_slices_become_one_split(sizes, data):
    # x[:, a:b] for some of the pieces of a partition of axis 1: a split when >= 2 pieces
    # are read and the unread gaps are no larger than what is read.
    used = data.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    pieces = [(bounds[i], bounds[i + 1]) for i in range(len(sizes)) if used[i]]
    x = _x(3, bounds[-1])

    def f(x):
        return [jnp.exp(x[:, lo:hi]) for lo, hi in pieces]

    c, ops = _program(f, (x,))
    assert_tree_close(c(x), f(x), rtol=1e-6, atol=1e-6)
    read = sum(hi - lo for lo, hi in pieces)
    merged = len(pieces) >= 2 and bounds[-1] - read <= read
    whole = len(pieces) == 1 and pieces[0] == (0, bounds[-1])
    want = ([] if whole else ["split"] if merged else ["slice_by_index"] * len(pieces))
    assert [t for t in _types(ops) if t in ("split", "slice_by_index")] == want
    if pieces:
        g, _ = _program(lambda x: sum(jnp.sum(y * y) for y in f(x)), (x,), grad=True)
        assert_tree_close(g(x), jax.grad(lambda x: sum(jnp.sum(y * y) for y in f(x)))(x),
                          rtol=1e-5, atol=1e-6)


@settings(max_examples=5, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=6), st.data())
def test_jnp_split_with_some_pieces_read(sizes, data):
    # The same rule as for slices: a split while >= 2 read pieces hold at least as many
    # elements as the unread ones, else a slice per read piece.
    used = data.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    cut = list(np.cumsum(sizes)[:-1])
    x = _x(2, sum(sizes))

    def f(x):
        return [jnp.exp(p) for p, u in zip(jnp.split(x, cut, axis=1), used) if u]

    c, ops = _program(f, (x,))
    assert_tree_close(c(x), f(x), rtol=1e-6, atol=1e-6)
    read = sum(n for n, u in zip(sizes, used) if u)
    merged = sum(used) >= 2 and sum(sizes) - read <= read
    want = ["split"] if merged else ["slice_by_index"] * sum(used)
    assert [t for t in _types(ops) if t in ("split", "slice_by_index")] == want


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.bool_])
def test_split_of_small_ints_and_bools(dtype):
    # int8 / uint8 are carried in int32 (coreml/smallint.py): a split moves values, no wrap.
    x = np.arange(-12, 12).reshape(4, 6).astype(dtype)
    f = lambda x: jnp.split(x, 3, axis=1)  # noqa: E731
    c, ops = _program(f, (x,))
    assert _types(ops).count("split") == 1 and "slice_by_index" not in _types(ops)
    assert not {"add", "mod"} & set(_types(ops))  # no small-int wrap after a split
    for got, want in zip(c(x), f(x)):
        np.testing.assert_array_equal(got, want)


# -- 3. scalar multiplications ---------------------------------------------------------
def _const_muls(ops):
    return [op for op in ops if op.op_type == "mul" and _const_operand(op) is not None]


def test_mean_square_gradient_is_one_mul():
    def f(x):
        return jnp.mean(x ** 2)  # VJP: (2 * x) * (1 / 4096)

    x = _x(64, 64)
    g, ops = _program(f, (x,), grad=True)
    assert _types(ops) == ["mul"] and _const_operand(ops[0]) == 2.0 / 4096
    np.testing.assert_array_equal(_bits(g(x)), _bits(np.asarray(jax.grad(f)(x))))


def test_scalar_muls_not_folded_without_a_power_of_two_or_in_fp16():
    def f(x):
        return (x * 3.0) * 5.0

    x = _x(4, 5)
    c, ops = _program(f, (x,))
    assert len(_const_muls(ops)) == 2
    np.testing.assert_array_equal(_bits(c(x)), _bits(np.asarray(f(x))))
    g = lambda x: (x * 3.0) * 0.25  # noqa: E731
    c, ops = _program(g, (x,))
    assert len(_const_muls(ops)) == 1
    np.testing.assert_array_equal(_bits(c(x)), _bits(np.asarray(g(x))))
    _, ops = _program(g, (x,), precision="fp16")
    assert len(_const_muls(ops)) == 2


def _chain(a, b):
    gr = Graph()
    bld = Builder(gr)
    x = gr.add_input("x", TensorType((3,), DType.f32))
    y = bld.add("mul", x, bld.constant(np.float32(a)))
    gr.add_output("z", bld.add("mul", y, bld.constant(np.float32(b))))
    return gr


@pytest.mark.parametrize("a, b, folds", [
    (3.0, 0.5, True), (0.25, 7.0, True), (2.0 ** 32, 2.0 ** -5, True),
    (2.0 ** 33, 0.5, False),      # a constant outside [2**-32, 2**32]
    (3.0, 2.0 ** -40, False),
    (3.0, 7.0, False),            # no power of two
    (float("inf"), 2.0, False),
])
def test_fold_scalar_muls_bounds(a, b, folds):
    gr = _chain(a, b)
    assert fold_scalar_muls(gr) == int(folds)
    assert sum(n.op == "mul" for n in gr.nodes) == (1 if folds else 2)
    assert fold_scalar_muls(_chain(a, b), precision="fp16") == 0


def test_split_of_a_flexible_value_stays_slices():
    # RLX split needs a static shape: with a flexible batch, jnp.split is a slice per
    # piece (each takes the flexible axis whole), and runs at any size in range.
    def f(x):
        a, b = jnp.split(x, [3], axis=1)
        return a * 2.0, jnp.exp(b)

    fn = rlxjax.coreml_jit(f, backend="reference", flexible={"x": {0: (1, 8)}})
    for n in (1, 5):
        x = _x(n, 7, seed=n)
        assert_tree_close(fn(x), f(x), rtol=1e-6, atol=1e-6)
    hist = fn.lower(_x(2, 7)).compile().op_histogram()
    assert "split" not in hist and hist.get("slice_by_index", 0) >= 2
