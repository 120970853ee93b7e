"""The legalize stage (rlxjax/transforms/legalize/): a composite op is decomposed once in the
RLX graph for a format that does not run it natively, and left alone for one that does.
The decompositions' numbers are checked against JAX where a format runs them: the Core AI
format has no norm rules, so tests/coreai_format (test_coreai_ops.py's fused ops and their
backward against float64, the fuzz's batch norms) run every norm through them."""
from __future__ import annotations

import pytest

from op_samples import sample
from rlxjax.errors import UnsupportedPrimitiveError
from rlxjax.ir import DType, verify
from rlxjax.ir.ops import OPS
from rlxjax.transforms.legalize import decomposition, legalize
from rlxjax.coreai.lower import native as coreai_native
from rlxjax.coreml import lower as _coreml_lower  # noqa: F401  (registers its lowerings)
from rlxjax.coreml.registry import LOWERINGS

NORMS = sorted(n for n, d in OPS.items() if d.family in ("norm", "norm_grad"))


def _ops(g):
    return {n.op for n in g.nodes} | {o for n in g.nodes for s in n.subgraphs() for o in _ops(s)}


def test_every_norm_and_its_backward_has_one_decomposition():
    assert all(decomposition(n) is not None for n in NORMS)


@pytest.mark.parametrize("op", NORMS)
def test_a_composite_is_decomposed_for_a_format_without_it(op):
    g = sample(op)
    new = legalize(g, coreai_native)
    verify(new)
    assert new is not g and op not in _ops(new)
    assert all(coreai_native(n) for n in new.nodes)  # Core AI lowers every op left
    assert [v.type for _, v in new.outputs] == [v.type for _, v in g.outputs]
    assert [n for n, _ in new.inputs] == [n for n, _ in g.inputs]
    assert op in _ops(g)  # the graph given is never changed


@pytest.mark.parametrize("op", NORMS)
def test_a_format_that_runs_the_op_natively_gets_the_graph_itself(op):
    """Core ML keeps its fused norms (MIL's layer_norm, fp16-safe statistics): nothing to
    legalize, and no copy of the graph is made."""
    g = sample(op)
    assert legalize(g, lambda n: n.op in LOWERINGS) is g


def test_region_graphs_are_legalized_too():
    from rlxjax.ir import Graph, TensorType
    from rlxjax.ir.builder import Builder

    body = sample("layer_norm")
    g = Graph()
    b = Builder(g)
    i = g.add_input("i", TensorType((), DType.i32))
    ins = [g.add_input(n, v.type) for n, v in body.inputs]
    (y,) = g.add_node("cond", [i] + ins, {}, regions={"branches": (body, body)}).outputs
    g.add_output("y", b.add("neg", y))
    new = legalize(g, coreai_native)
    assert "layer_norm" in _ops(g) and "layer_norm" not in _ops(new)


def test_an_fp16_norm_is_refused_by_name_not_decomposed_into_overflowing_statistics():
    from rlxjax.ir import Graph, TensorType
    from rlxjax.ir.builder import Builder

    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((2, 4), DType.f16))
    with b.at("model.py:3 (loss)"):
        g.add_output("y", b.add("layer_norm", x, axis=1, eps=1e-5, has_gamma=False,
                                has_beta=False))
    with pytest.raises(UnsupportedPrimitiveError, match=r"layer_norm.*model\.py:3.*fp32"):
        legalize(g, coreai_native)


def _pool_sum(dtype, op="reduce_window_sum"):
    from rlxjax.ir import Graph, TensorType
    from rlxjax.ir.builder import Builder

    g = Graph()
    x = g.add_input("x", TensorType((6, 5), dtype))
    w = dict(window=(3, 2), strides=(2, 1), dilation=(1, 1))
    if op == "reduce_window_sum":
        y = Builder(g).add(op, x, **w)
    else:  # max pooling's backward: its overlapping windows' contributions are summed
        y = Builder(g).add(op, g.add_input("s", TensorType((2, 4), dtype)), x, select="ge", **w)
    g.add_output("y", y)
    return g


def _converts(g):
    return [(n.inputs[0].type.dtype, n.params["dtype"]) for n in g.nodes if n.op == "convert"]


def test_a_carried_dtype_is_wrapped_or_rounded_once_not_after_every_op():
    """policy.py: a format that carries fp16 in fp32 (or int8 in int32, every format) gets a
    round_once decomposition on the wide dtype, converted back once at the end (as XLA and
    the composite rule it replaces round once); one computing fp16 natively gets it op for
    op in fp16. The pool sums are such decompositions; the max pools move values only."""
    never = lambda n: False  # noqa: E731
    wide = legalize(_pool_sum(DType.f16), never, carried_f16=True)
    assert _converts(wide) == [(DType.f16, DType.f32), (DType.f32, DType.f16)]
    assert {n.outputs[0].type.dtype for n in wide.nodes if n.op == "add"} == {DType.f32}
    native16 = legalize(_pool_sum(DType.f16), never)
    assert _converts(native16) == [] and "add" in _ops(native16)
    small = legalize(_pool_sum(DType.i8, "select_and_scatter_add"), never)
    assert _converts(small)[:2] == [(DType.i8, DType.i32)] * 2
    assert _converts(small)[-1] == (DType.i32, DType.i8)
    assert all(n.outputs[0].type.dtype != DType.i8 for n in small.nodes[:-1])
    assert _converts(legalize(_pool_sum(DType.f32), never, carried_f16=True)) == []
