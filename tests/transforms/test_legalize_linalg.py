"""The linalg family is decomposed once (rlxjax/transforms/legalize/linalg*.py): both
formats take the same decomposition, nothing of the family is left for a format to lower,
and every loop is a counted ``while`` (its ``trip_count``: Core AI guards those loops). The
numbers are compared with JAX in tests/frontend/test_linalg.py (Core ML) and
tests/coreai_format/test_coreai_linalg.py (Core AI)."""
from __future__ import annotations

import pytest

import rlxjax.coreml.lower  # noqa: F401  (registers the Core ML lowerings)
from op_samples import sample
from rlxjax.coreai.lower import native as coreai_native
from rlxjax.coreml.registry import lowers_natively
from rlxjax.coreml.targets import get_target
from rlxjax.ir.ops import OPS
from rlxjax.ir.printer import format_graph
from rlxjax.transforms.legalize import legalize

LINALG = sorted(n for n, d in OPS.items() if d.family == "linalg")


def _nodes(g):
    for n in g.nodes:
        yield n
        for r in n.subgraphs():
            yield from _nodes(r)


@pytest.mark.parametrize("op", LINALG)
def test_both_formats_take_the_one_decomposition(op):
    coreml = legalize(sample(op), lambda n: lowers_natively(n.op, get_target("iOS17")))
    coreai = legalize(sample(op), coreai_native)
    assert format_graph(coreml) == format_graph(coreai)
    nodes = list(_nodes(coreml))
    assert not [n.op for n in nodes if OPS[n.op].family == "linalg"]
    loops = [n for n in nodes if n.op == "while"]
    assert loops and all(isinstance(n.params.get("trip_count"), int) for n in loops)
    assert all(coreai_native(n) and lowers_natively(n.op, get_target("iOS15")) for n in nodes)


def test_core_ai_refuses_fp16_linalg_by_name_as_before():
    from rlxjax.errors import UnsupportedPrimitiveError
    from rlxjax.ir import DType, Graph, TensorType

    g = Graph()
    a = g.add_input("a", TensorType((3, 3), DType.f16))
    g.add_output("l", g.add_node("cholesky", [a], {}).outputs[0])
    with pytest.raises(UnsupportedPrimitiveError, match="cholesky of f16 is not lowered for Core AI"):
        legalize(g, coreai_native)
