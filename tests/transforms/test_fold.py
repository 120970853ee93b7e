"""Constant folding on the RLX graph (rlxjax/transforms/fold): a function of constants
compiles to a constant equal to what the same function computes, unfolded, on the
reference backend (the program with the constants as inputs) and to JAX's result.

Bit-exact for the ops whose rounding is specified; within a few ulps for the
transcendentals (numpy's kernels against the reference interpreter's MIL decompositions).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import rlxjax
import rlxjax.nn
from rlxjax.ir import Graph, TensorType, DType
from rlxjax.ir.builder import Builder
from rlxjax.ir.ops import OPS
from rlxjax.transforms.fold import FOLD_MAX_GROWTH, fold_constants

from helpers import examples

pytestmark = pytest.mark.reference_backend  # bit-identity with the MIL program's semantics

FEW = settings(max_examples=examples(10), deadline=None)
PER_OP = settings(max_examples=examples(3), deadline=None)  # each op is its own test case
F32 = np.float32


def _floats(shape, lo=-8.0, hi=8.0, dtype=F32):
    return hnp.arrays(dtype, shape, elements=st.floats(lo, hi, width=32,
                                                       allow_subnormal=False))


def _ints(shape, lo=-50, hi=50):
    return hnp.arrays(np.int32, shape, elements=st.integers(lo, hi))


def _shapes(min_dims=0, max_dims=3):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=4)


def _same(got, want, ulps=0):
    """Equal values (NaNs equal); within ``ulps`` units in the last place, or with
    ``ulps="sum"`` to fp32 tolerance (a sum's order is the kernel's choice)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if ulps == "sum":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    elif ulps and got.dtype.kind == "f":
        np.testing.assert_array_max_ulp(got, want, maxulp=ulps)
    else:
        np.testing.assert_array_equal(got, want)


def check_fold(fn, *consts, ulps=0, jax_ulps=None, precision="fp32"):
    """``fn`` of constants folds away; the constant equals ``fn`` run unfolded (the same
    values as program inputs) on the reference backend, and ``fn`` under JAX."""
    folded = rlxjax.coreml_jit(lambda: fn(*map(jnp.asarray, consts)), backend="reference",
                               precision=precision).lower().compile()
    ops = [n.op for n in folded.graph.nodes]
    assert set(ops) <= {"constant"}, f"not folded: {ops}"
    unfolded = rlxjax.coreml_jit(fn, backend="reference", precision=precision)
    got = folded()
    _same(got, unfolded(*consts), ulps)
    if precision == "fp32":
        _same(_flush_subnormals(got), jax.jit(fn)(*consts), ulps if jax_ulps is None else jax_ulps)
    return got


def _flush_subnormals(a):
    """``a`` with subnormal fp32 values flushed to zero, as XLA on CPU computes fp32
    arithmetic (numpy and the reference backend keep them: 2**-126 / 2 is 2**-127 there,
    0 in JAX). fp16 subnormals survive in JAX too (f32 -> f16 of 1e-6 is 1e-6)."""
    a = np.asarray(a)
    if a.dtype != np.float32:
        return a
    return np.where(np.abs(a) < np.finfo(a.dtype).tiny, np.zeros_like(a), a).astype(a.dtype)


# -- elementwise ---------------------------------------------------------------------
EXACT_UNARY = {"neg": jnp.negative, "abs": jnp.abs, "floor": jnp.floor, "ceil": jnp.ceil,
               "square": jnp.square, "sqrt": lambda x: jnp.sqrt(jnp.abs(x)),
               "round": jnp.round, "round_away": lambda x: jax.lax.round(x),
               "cube": lambda x: x ** 3, "inv_sq": lambda x: x ** -2,
               "stop_gradient": jax.lax.stop_gradient}
TRANSCENDENTAL = {"exp": jnp.exp, "exp2": jnp.exp2, "tanh": jnp.tanh, "sin": jnp.sin,
                  "cos": jnp.cos, "logistic": jax.nn.sigmoid, "erf": jax.lax.erf,
                  "log": lambda x: jnp.log(jnp.abs(x) + 1),
                  "log1p": lambda x: jnp.log1p(jnp.abs(x)),
                  "expm1": jnp.expm1, "rsqrt": lambda x: jax.lax.rsqrt(jnp.abs(x) + 1)}


@pytest.mark.parametrize("name", sorted(EXACT_UNARY))
@PER_OP
@given(_shapes().flatmap(_floats))
def test_exact_unary_ops_fold_bit_exactly(name, x):
    check_fold(EXACT_UNARY[name], x)


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
@PER_OP
@given(_shapes().flatmap(_floats))
def test_transcendental_ops_fold_within_ulps(name, x):
    check_fold(TRANSCENDENTAL[name], x, ulps=4, jax_ulps=8)


BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide,
          "max": jnp.maximum, "min": jnp.minimum, "rem": jnp.fmod, "lt": jnp.less,
          "eq": jnp.equal, "ge": jnp.greater_equal, "where": lambda x, y: jnp.where(x < y, x, y),
          "clamp": lambda x, y: jax.lax.clamp(F32(-1), x, y)}


@st.composite
def _two_operands(draw, elements):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    return [draw(elements(s)) for s in shapes.input_shapes]


@pytest.mark.parametrize("name", sorted(BINARY))
@PER_OP
@given(_two_operands(_floats))
def test_binary_float_ops_fold_bit_exactly(name, xy):
    fn = BINARY[name]
    if name == "clamp":
        xy[1] = np.broadcast_to(xy[1], np.broadcast_shapes(xy[0].shape, xy[1].shape)).copy()
        xy[0] = np.broadcast_to(xy[0], xy[1].shape).copy()
    # XLA on CPU divides by a broadcast divisor as x * (1 / y): 5 / 0.375 is 13.333334
    # there, the correctly rounded 13.333333 in numpy (the fold and the reference backend)
    check_fold(fn, *xy, jax_ulps=1 if name == "div" else None)


INT_BINARY = {"add": jnp.add, "mul": jnp.multiply, "rem": jnp.fmod,
              "div": lambda x, y: jax.lax.div(*jnp.broadcast_arrays(x, y)),
              "max": jnp.maximum, "le": jnp.less_equal}


@pytest.mark.parametrize("name", sorted(INT_BINARY))
@PER_OP
@given(_two_operands(_ints))
def test_int_ops_fold_bit_exactly(name, xy):
    x, y = xy
    if name in ("div", "rem"):
        y = np.where(y == 0, 7, y).astype(np.int32)
    check_fold(INT_BINARY[name], x, y)


BOOL_OPS = {"and": jnp.logical_and, "or": jnp.logical_or, "xor": jnp.logical_xor,
            "not": lambda x, y: ~x, "select": lambda x, y: jnp.where(x, y, ~y),
            "lt": jnp.less, "eq": jnp.equal}


@pytest.mark.parametrize("name", sorted(BOOL_OPS))
@PER_OP
@given(_two_operands(lambda s: hnp.arrays(np.bool_, s)))
def test_bool_ops_fold_exactly(name, xy):
    check_fold(BOOL_OPS[name], *xy)


def test_int_division_by_zero_is_not_folded():
    x, y = np.array([7, -7], np.int32), np.array([0, 2], np.int32)
    compiled = rlxjax.coreml_jit(lambda: jax.lax.div(x, y)).lower().compile()
    assert any(n.op == "div" for n in compiled.graph.nodes)


@FEW
@given(_shapes().flatmap(lambda s: _floats(s, -300.0, 300.0)),
       st.sampled_from([np.int32, np.bool_, np.float16]))
def test_convert_folds_exactly(x, dtype):
    check_fold(lambda x: x.astype(dtype), x)


# -- reductions, shapes, linear, indexing ----------------------------------------------
REDUCE = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "prod": jnp.prod,
          "argmax": lambda x, axis: jnp.argmax(x, axis),
          "argmin": lambda x, axis: jnp.argmin(x, axis)}


@pytest.mark.parametrize("name", sorted(REDUCE))
@PER_OP
@given(_shapes(1).flatmap(_floats), st.data())
def test_reductions_fold(name, x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    ulps = 2 if name in ("sum", "prod") else 0  # JAX's accumulation order is its own
    check_fold(lambda x: REDUCE[name](x, axis=axis), x, jax_ulps=ulps)


SHAPE = {  # on arrays of rank >= 1 with every dim >= 2
    "reshape": lambda x: x.reshape(-1),
    "transpose": lambda x: x.T,
    "broadcast": lambda x: jnp.broadcast_to(x, (2,) + x.shape),
    "rev": lambda x: x[::-1],
    "concatenate": lambda x: jnp.concatenate([x, x * 2], axis=0),
    "slice": lambda x: x[..., 1::2],
    "split": lambda x: jnp.concatenate(jnp.split(x, [1], axis=-1)[::-1], axis=-1),
    "pad": lambda x: jax.lax.pad(x, F32(-3), [(1, -1, 1)] * x.ndim),
    "cumsum": lambda x: jnp.cumsum(x, axis=-1),
    "cumsum_rev": lambda x: jax.lax.cumsum(x, axis=0, reverse=True),
    "gather": lambda x: x[jnp.array([0, 0])],
    "scatter_add": lambda x: x.at[jnp.array([0, 0])].add(1.5),
    "scatter_max": lambda x: x.at[jnp.array([0, 0])].max(x[-1]),
    "scatter_set": lambda x: x.at[jnp.array([1, 0])].set(x[0] * 3),
    "dynamic_slice": lambda x: jax.lax.dynamic_slice_in_dim(x, 1, 1, 0),
    "dynamic_update": lambda x: jax.lax.dynamic_update_index_in_dim(x, x[0] * 0 + 5, 0, 0),
}


@pytest.mark.parametrize("name", sorted(SHAPE))
@PER_OP
@given(hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4).flatmap(_floats))
def test_shape_and_indexing_ops_fold_bit_exactly(name, x):
    # results larger than the size policy stay ops (test_large_broadcasts_stay_ops_but_their_reductions_fold): not this test's case
    assume(np.asarray(jax.eval_shape(SHAPE[name], x).shape).prod() <= FOLD_MAX_GROWTH)
    # a cumulative sum's accumulation order is JAX's choice: with cancellation (x = [-1, 0.15,
    # 1]) ulps of the result are meaningless, so compare to fp32 tolerance, as for sums
    check_fold(SHAPE[name], x, jax_ulps="sum" if "cumsum" in name else None)


@FEW
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.data())
def test_dot_general_folds(m, k, n, b, data):
    x = data.draw(_floats((b, m, k)))
    y = data.draw(_floats((b, k, n)))
    # numpy's matmul kernels pick their own summation order (BLAS for some layouts)
    check_fold(lambda x, y: jnp.einsum("bmk,bkn->bnm", x, y), x, y, ulps="sum")


def test_fp16_programs_fold_in_fp16():
    x = np.linspace(-3, 3, 12, dtype=F32).reshape(3, 4) * F32(1.001)
    fn = lambda x: (x * F32(1.7) + F32(0.3)).sum(axis=0) / F32(3)  # noqa: E731
    got = check_fold(fn, x, precision="fp16")
    assert not np.array_equal(got, fn(x))  # fp32 differs: the fold computed in fp16


# -- policy ----------------------------------------------------------------------------
def test_large_broadcasts_stay_ops_but_their_reductions_fold():
    def fn(x):
        big = jnp.broadcast_to(F32(2.0), (64, 64))
        return big, x + big.sum()

    compiled = rlxjax.coreml_jit(fn, backend="reference").lower(np.ones(3, F32)).compile()
    nodes = [n.op for n in compiled.graph.nodes]
    assert nodes.count("broadcast_in_dim") == 1 and "reduce_sum" not in nodes
    big, y = compiled(np.ones(3, F32))
    np.testing.assert_array_equal(y, np.full(3, 8193, F32))
    assert compiled.cost_analysis()["weight_bytes"] < 64 * 64 * 4


def test_random_and_region_ops_have_no_fold_implementation():
    for op in OPS.values():
        if op.effect != "pure" or op.family in ("random", "control"):
            assert op.impl("fold") is None, op.name


def test_random_draws_are_never_folded():
    g = Graph()
    b = Builder(g)
    mask = b.add("bernoulli", shape=(4,), dtype=DType.f32, prob=0.5, seed=3)
    g.add_output("y", b.add("mul", mask, b.constant(np.full(4, 2.0, F32))))
    assert fold_constants(g) == 0
    assert [n.op for n in g.nodes] == ["bernoulli", "constant", "mul"]

    def drop(x):
        keep = rlxjax.nn.dropout(jnp.ones((8,), F32) * 3, 0.5, deterministic=False, seed=1)
        return x * keep

    compiled = rlxjax.coreml_jit(drop).lower(np.ones(8, F32)).compile()
    assert "random_bernoulli" in compiled.op_histogram()


def test_folded_constants_keep_the_source_line():
    g = Graph()
    b = Builder(g)
    c = b.constant(np.arange(4, dtype=F32))
    with b.at("model.py:12"):
        e = b.add("exp", c)
    g.add_output("y", b.add("mul", e, g.add_input("x", TensorType((4,), DType.f32))))
    assert fold_constants(g) == 1
    (const,) = [n for n in g.nodes if n.op == "constant"]  # the input constant is gone
    assert const.source == "model.py:12"
    np.testing.assert_array_equal(const.params["value"], np.exp(np.arange(4, dtype=F32)))


def test_scan_constants_fold_inside_the_body():
    w = np.arange(6, dtype=F32).reshape(2, 3)

    def fn(x):
        def body(c, _):
            return c + jnp.tanh(w.T @ w).sum(), None  # a function of constants only
        return jax.lax.scan(body, x, None, length=3)[0]

    compiled = rlxjax.coreml_jit(fn, backend="reference").lower(np.ones((), F32)).compile()
    assert "tanh" not in compiled.op_histogram() and "matmul" not in compiled.op_histogram()
    np.testing.assert_allclose(compiled(np.ones((), F32)), fn(np.ones((), F32)), rtol=1e-6)



def test_a_model_of_constants_and_inputs_is_bit_identical_without_folding(monkeypatch):
    """Folding changes where values are computed, not what: a model whose weights are
    closed-over constants computes the same bits folded and unfolded (its ops lower to
    one MIL op each, computed with the same numpy kernels by the reference backend)."""
    from rlxjax.transforms import pipeline

    r = np.random.default_rng(0)
    w1, w2 = r.standard_normal((8, 16)).astype(F32), r.standard_normal((16, 4)).astype(F32)
    scale = np.linspace(0.5, 2.0, 16, dtype=F32)

    def model(x):
        h = x @ w1 + jnp.tanh(w1.sum(axis=0)) * scale ** 2
        h = jax.nn.gelu(h * jax.nn.sigmoid(scale), approximate=False)
        h = h / jnp.sqrt(jnp.square(scale).mean() + F32(1e-5))
        return jax.nn.softmax(h @ (w2 * jnp.exp(-jnp.abs(w2)))), jnp.argmax(w2, axis=0)

    x = r.standard_normal((3, 8)).astype(F32)
    on = rlxjax.coreml_jit(model, backend="reference").lower(x).compile()
    with monkeypatch.context() as m:
        m.setattr(pipeline, "BEFORE_LOWERING", ())  # no folding
        off = rlxjax.coreml_jit(model, backend="reference").lower(x).compile()
    assert on.cost_analysis()["mil_ops"] < off.cost_analysis()["mil_ops"]
    on.validate()
    for got, base in zip(on(x), off(x)):
        np.testing.assert_array_equal(got, base)
    for got, want in zip(on(x), model(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _all_constant_ops(ops):
    """Non-const MIL ops every input of which is a const (what folding should leave none
    of, but for large fills and tiles kept by the size policy)."""
    consts, found = set(), []
    for op in ops:
        if op.type == "const":
            consts.update(o.name for o in op.outputs)
    for op in ops:
        names = [b.name for arg in op.inputs.values() for b in arg.arguments
                 if b.WhichOneof("binding") == "name"]
        if op.type != "const" and names and all(n in consts for n in names):
            found.append(op.type)
    return found


LOWERING_CONSTANTS = {
    # scan buffers for stacked outputs (a small fill), bool ones too
    "scan": (lambda x: jax.lax.scan(lambda c, t: (c + t, (c * t, c > t)), x[0], x), (4, 3)),
    # a gather with constant indices (the indices are reshaped)
    "gather": (lambda x: x[np.array([2, 0, 1])], (3, 2)),
    # constant start indices of dynamic slices and updates
    "dynamic": (lambda x: jax.lax.dynamic_update_slice(
        x, jax.lax.dynamic_slice(x, (np.int32(1), np.int32(0)), (2, 2)) * 2,
        (np.int32(0), np.int32(1))), (3, 3)),
    "pow0": (lambda x: jax.lax.integer_pow(x, 0) + x, (2, 2)),
}


@pytest.mark.parametrize("name", sorted(LOWERING_CONSTANTS))
def test_lowerings_leave_no_all_constant_ops(name):
    fn, shape = LOWERING_CONSTANTS[name]
    x = np.arange(np.prod(shape), dtype=F32).reshape(shape) - 2
    compiled = rlxjax.coreml_jit(fn, backend="reference").lower(x).compile()
    assert _all_constant_ops(compiled.mil_ops()) == []
    compiled.validate()
    got, want = jax.tree_util.tree_leaves(compiled(x)), jax.tree_util.tree_leaves(fn(x))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_select_of_small_constant_branches_is_no_all_constant_tile():
    # RLX select broadcasts implicitly (VJP rules emit it so); MIL's select takes its
    # shape from the branches, so the lowering tiles one: a constant, when it is small
    import tempfile

    from rlxjax.coreml.lower import lower_graph
    from rlxjax.coreml.targets import get_target

    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((3, 4), DType.f32))
    pred = b.add("gt", x, b.constant(np.zeros((), F32)))
    g.add_output("y", b.add("select", pred, b.constant(np.float32(-1)),
                            b.constant(np.arange(4, dtype=F32))))
    with tempfile.TemporaryDirectory() as d:
        model, _, _ = lower_graph(g, get_target("iOS17"), "fp32", d)
    block = next(iter(model.mlProgram.functions["main"].block_specializations.values()))
    ops = list(block.operations)
    assert _all_constant_ops(ops) == [] and "tile" not in [o.type for o in ops]


@pytest.mark.parametrize("value", [np.float32(2.5), np.array([True, False]), np.int32(3)])
def test_constant_outputs_need_no_conversion_ops(value):
    # rank-0 and bool outputs travel as rank-1 / int32: a constant is stored that way
    flip = (lambda v: ~v) if value.dtype == np.bool_ else (lambda v: -v)  # noqa: E731
    compiled = rlxjax.coreml_jit(lambda: (jnp.asarray(value), flip(jnp.asarray(value))),
                                 backend="reference").lower().compile()
    assert compiled.op_histogram() == {"identity": 2}
    for got, want in zip(compiled(), (value, flip(value))):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == value.dtype and got.shape == np.shape(value)


def test_folding_is_idempotent_on_regions():
    w = np.arange(3, dtype=F32)

    def fn(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: c * jnp.exp(w).sum(), x)

    lowered = rlxjax.coreml_jit(fn, backend="reference").lower(np.ones((), F32))
    assert fold_constants(lowered.graph) >= 1
    text = str(lowered.graph)
    assert fold_constants(lowered.graph) == 0 and str(lowered.graph) == text
    np.testing.assert_allclose(lowered.compile()(np.ones((), F32)), fn(np.ones((), F32)),
                               rtol=1e-6)
