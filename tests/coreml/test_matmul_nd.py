"""dot_general lowered as one matmul on the lhs at its own rank (coreml/rules/linear.py
``nd_form``): MIL's matmul broadcasts the leading dims of ``[..., M, K] @ [K, N]``, so
a Dense on a rank-3 activation (and its input gradient) needs no flatten / unflatten.

Layouts around that case (lhs rank 2-4, contracting dims last or elsewhere, rhs [K, N] or
transposed [N, K] or shuffled, batch dims, several contracting / rhs free dims) in fp32,
fp16 and int32, compared with jax.jit and loaded by coremltools' MIL loader
(``check_against_jax`` validates). Inputs are exact in every dtype (dyadic k/4 in [-4, 4]
in fp32: |sum| <= 16 * 16 terms; k/2 in [-2, 2] in fp16: |sum| <= 4 * 16 terms, multiples
of 1/4, within fp16's 11-bit significand), so no summation order matters.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax

import rlxjax
from helpers import check_against_jax
from primitive_strategies import F32, I32, SOME, arrays, dyadic_elements

F16 = np.float16
ELEMENTS = {F32: dyadic_elements(-4, 4, denom=4), F16: dyadic_elements(-2, 2, denom=2),
            I32: st.integers(-20, 20)}


@st.composite
def nd_problems(draw):
    """(lhs shape, rhs shape, dimension_numbers): lhs [batch, free, contract] in that
    order or [batch, free[:-1], contract, free[-1]] (matmul's transpose_x), or a shuffle; rhs [batch, contract, free], [batch, free, contract]
    or shuffled."""
    while True:
        nb, nf, nc, nr = (draw(st.integers(0, 2)), draw(st.integers(1, 3)),
                          draw(st.integers(1, 2)), draw(st.integers(0, 2)))
        if 2 <= nb + nf + nc <= 4 and nb + nc + nr <= 4:
            break
    size = st.integers(1, 4)
    sizes = {"b": [draw(size) for _ in range(nb)], "c": [draw(size) for _ in range(nc)],
             "f": [draw(size) for _ in range(nf)], "g": [draw(size) for _ in range(nr)]}
    b = [("b", i) for i in range(nb)]
    c = [("c", i) for i in range(nc)]
    f = [("f", i) for i in range(nf)]
    g = [("g", i) for i in range(nr)]
    fitting = [b + f + c, b + f[:-1] + c + f[-1:]]
    lhs = draw(st.sampled_from(fitting + [b + f + c, b + c + f, None]))
    if lhs is None:
        lhs = draw(st.permutations(b + f + c))
        lhs = [x for x in lhs if x[0] != "b"] if nb else lhs
        lhs = b + lhs  # JAX wants batch dims in the same order in both operands
    rhs = draw(st.sampled_from([b + c + g, b + g + c, None]))
    if rhs is None:
        rhs = b + [x for x in draw(st.permutations(c + g))]
    shape = lambda labels: tuple(sizes[k][i] for k, i in labels)
    pos = lambda labels, kind, n: tuple(labels.index((kind, i)) for i in range(n))
    dn = ((pos(lhs, "c", nc), pos(rhs, "c", nc)), (pos(lhs, "b", nb), pos(rhs, "b", nb)))
    return shape(lhs), shape(rhs), dn


@pytest.mark.parametrize("dtype", [F32, F16, I32])
@SOME
@given(data=st.data())
def test_dot_general_layouts_match_jax(dtype, data):
    lshape, rshape, dn = data.draw(nd_problems())
    a = data.draw(arrays(dtype, lshape, ELEMENTS[dtype]))
    b = data.draw(arrays(dtype, rshape, ELEMENTS[dtype]))
    compiled = check_against_jax(lambda x, y: lax.dot_general(x, y, dn), a, b)
    hist = compiled.op_histogram()
    hist.pop("cast", None)  # fp16 inputs / outputs at the program boundary
    assert hist.get("matmul", 0) == 1, hist
    (lc, rc), (lb, rb) = dn
    nf, nr = len(lshape) - len(lc) - len(lb), len(rshape) - len(rc) - len(rb)
    free = [d for d in range(len(lshape)) if d not in lc + lb]
    fits = list(range(len(lshape))) in (list(lb) + free + list(lc),
                                        list(lb) + free[:-1] + list(lc) + free[-1:])
    # the nd form when the lhs fits and it needs fewer than the flattened form's two
    # reshapes (merging contracting dims, a unit dim in the rhs for a batch, splitting N)
    nd = fits and nf >= 2 and (len(lc) > 1) + (len(lb) > 0) + (nr != 1) < 2
    (mm,) = [op for op in compiled.mil_ops() if op.type == "matmul"]
    rank = len(mm.outputs[0].type.tensorType.dimensions)
    assert rank == (len(lb) + nf + 1 if nd else len(lb) + 2), (rank, hist)
    if nd and len(lc) == 1 and not lb and nr == 1:
        # rhs [K, N] or [N, K] (transpose_y): the lhs enters as it is, no data movement
        assert hist == {"matmul": 1}, hist


@pytest.mark.parametrize("dtype", [F32, F16, I32])
@pytest.mark.parametrize("sx,sy,dn", [
    ((2, 3, 4), (4, 5), (((2,), (0,)), ((), ()))),
    ((2, 3, 4), (5, 4), (((2,), (1,)), ((), ()))),       # transpose_y
    ((2, 3, 2, 4), (4, 3), (((3,), (0,)), ((), ()))),    # rank 4
    ((2, 4, 3), (4, 5), (((1,), (0,)), ((), ()))),       # lhs [B, K, M]: transpose_x
    ((2, 3, 4, 3), (5, 4), (((2,), (1,)), ((), ()))),    # transpose_x and transpose_y
])
def test_lhs_with_contracting_dim_last_is_one_matmul(dtype, sx, sy, dn):
    rng = np.random.default_rng(0)
    a = (rng.integers(-8, 8, sx) / 4).astype(dtype)
    b = (rng.integers(-8, 8, sy) / 4).astype(dtype)
    compiled = check_against_jax(lambda x, y: lax.dot_general(x, y, dn), a, b)
    hist = compiled.op_histogram()
    hist.pop("cast", None)
    assert hist == {"matmul": 1}, hist


@pytest.mark.parametrize("dtype", [F32, F16])
def test_dense_on_a_rank3_input_is_one_matmul(dtype):
    model = nn.Dense(6, dtype=dtype, param_dtype=dtype)
    x = np.random.default_rng(0).integers(-8, 8, (2, 5, 8)).astype(dtype) / 4
    params = jax.tree.map(lambda p: (np.round(np.asarray(p) * 8) / 8).astype(dtype),
                          model.init(jax.random.PRNGKey(0), x))
    compiled = check_against_jax(model.apply, params, x)
    hist = compiled.op_histogram()
    hist.pop("cast", None)  # fp16 inputs / outputs at the program boundary
    assert hist == {"matmul": 1, "add": 1}, hist
    (mm,) = [op for op in compiled.mil_ops() if op.type == "matmul"]
    assert len(mm.outputs[0].type.tensorType.dimensions) == 3


def test_dense_gradient_input_side_keeps_rank():
    """coreml_grad of a Dense on [B, T, D]: dx is g @ W^T at rank 3 (transpose_y), only the
    weight gradient (contracting B and T) flattens its operands."""
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (2, 5, 8)).astype(F32) / 4
    w = rng.integers(-8, 8, (8, 6)).astype(F32) / 4
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w) * x[..., :6])  # noqa: E731
    g = rlxjax.coreml_grad(loss, argnums=(0, 1), backend="reference")
    compiled = g.lower(w, x).compile()
    compiled.validate()
    got = compiled(w, x)
    want = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    ranks = sorted(len(op.outputs[0].type.tensorType.dimensions)
                   for op in compiled.mil_ops() if op.type == "matmul")
    assert ranks == [2, 3, 3], ranks  # dW flattened; forward and dx at rank 3
    assert compiled.op_histogram().get("reshape", 0) == 2  # x and g flattened for dW only


@pytest.mark.parametrize("spec,sx,sy,reshapes", [
    ("btk,kn->btn", (5, 8), (8, 3), 0),          # Dense: no reshape at all
    ("btk,nk->btn", (5, 8), (3, 8), 0),          # rhs transposed (transpose_y)
    ("bfmk,bkn->bfmn", (2, 3, 4), (4, 5), 1),    # batch dim: rhs gets a unit dim
    ("btk,knp->btnp", (5, 8), (8, 2, 3), 2),     # two rhs free dims: rhs merged, result split
])
def test_flexible_batch_through_the_nd_matmul(spec, sx, sy, reshapes):
    """The flexible batch (leading dim of both operands where both have it) flows through
    the nd matmul; the program loads in coremltools and matches JAX at several sizes."""
    rng = np.random.default_rng(2)
    batched_y = spec.split(",")[1].startswith("b")
    fn = lambda x, y: jnp.einsum(spec, x, y)  # noqa: E731
    flex = {"x": {0: (1, 16)}, **({"y": {0: (1, 16)}} if batched_y else {})}
    f = rlxjax.coreml_jit(fn, backend="reference", flexible=flex)
    for n in (1, 3, 7):
        x = rng.integers(-8, 8, (n,) + sx).astype(F32) / 4
        y = rng.integers(-8, 8, ((n,) if batched_y else ()) + sy).astype(F32) / 4
        np.testing.assert_allclose(f(x, y), jax.jit(fn)(x, y), rtol=1e-5, atol=1e-6)
    (compiled,) = f._cache.values()
    compiled.validate()
    hist = compiled.op_histogram()
    assert hist.get("matmul") == 1 and "transpose" not in hist, hist
    assert hist.get("reshape", 0) == reshapes, hist
