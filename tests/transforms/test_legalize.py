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
