"""The RLX graph: types, verifier, printer."""
import numpy as np
import pytest

from rlxjax.ir import (DType, Dyn, Graph, GraphVerificationError, IRTypeError, TensorType,
                       verify)
from rlxjax.ir.builder import Builder


def test_build_print_verify():
    g = Graph("f")
    b = Builder(g)
    x = g.add_input("params.w", TensorType((2, 3), DType.f32))
    y = b.add("reduce_sum", b.add("mul", x, b.constant(np.float32(2))), axes=(1,))
    g.add_output("out", y)
    verify(g)
    text = str(g)
    assert "graph f(" in text and "# params.w" in text and "reduce_sum(%2) {axes=(1,)}" in text
    assert g.op_histogram() == {"constant": 1, "mul": 1, "reduce_sum": 1}


def test_params_are_frozen():
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((4,), DType.f32))
    n = g.add_node("transpose", [x], {"perm": [0]})
    assert n.params["perm"] == (0,)
    with pytest.raises(TypeError):
        n.params["perm"] = (1,)
    c = b.constant(np.arange(3, dtype=np.int32)).node.params["value"]
    with pytest.raises(ValueError):
        c[0] = 5


def test_type_errors():
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((2, 3), DType.f32))
    i = g.add_input("i", TensorType((2, 3), DType.i32))
    with pytest.raises(IRTypeError, match="dtypes differ"):
        b.add("add", x, i)
    with pytest.raises(IRTypeError, match="cannot reshape"):
        b.add("reshape", x, shape=(5,))
    with pytest.raises(IRTypeError, match="do not broadcast"):
        b.add("add", x, g.add_input("z", TensorType((4,), DType.f32)))


def test_verifier_catches_use_before_def_and_bad_outputs():
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((2,), DType.f32))
    y = b.add("exp", x)
    g.add_output("o", y)
    verify(g)
    z = b.add("exp", y)
    g.nodes.insert(0, g.nodes.pop())  # move the second exp before the first
    with pytest.raises(GraphVerificationError, match="before it is defined"):
        verify(g)
    g.nodes.append(g.nodes.pop(0))
    g.add_output("o", z)
    with pytest.raises(GraphVerificationError, match="duplicate output"):
        verify(g)


def test_dynamic_dims_are_types():
    t = TensorType((Dyn("batch"), 3), DType.f32)
    assert not t.is_static and str(t) == "f32[batch,3]"
