"""docs/architecture.md's worked example is real: its two code blocks (a new composite op's
record and its decomposition), executed as they stand, give an op that Core ML lowers
through the legalize stage (run on the reference interpreter, compared with JAX) and whose
decomposition leaves only ops Core AI lowers. The op is removed from the records after."""
from __future__ import annotations

import os
import re
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlxjax.coreai.lower import native as coreai_native
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.targets import get_target
from rlxjax.ir import DType, Graph, TensorType
from rlxjax.ir.builder import Builder
from rlxjax.ir.ops import OPS, _require, defop, register_impl
from rlxjax.ir.schema import FLOAT, Param
from rlxjax.coreml.interpreter.interpreter import ReferenceProgram
from rlxjax.transforms.legalize import legalize

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "architecture.md")


def _example_blocks():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Worked example: a new composite op", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the worked example is one record plus one decomposition"
    return [re.sub(r"(?m)^ {3}", "", blk) for blk in blocks]  # the list's indent


@pytest.fixture
def scaled_add():
    ns = {"defop": defop, "Param": Param, "FLOAT": FLOAT, "_require": _require,
          "register_impl": register_impl}
    try:
        for block in _example_blocks():
            exec(compile(block, DOC, "exec"), ns)  # noqa: S102  (the documented code)
        yield OPS["scaled_add"]
    finally:
        OPS.pop("scaled_add", None)


def _graph():
    g = Graph()
    x = g.add_input("x", TensorType((3, 4), DType.f32))
    y = g.add_input("y", TensorType((3, 4), DType.f32))
    g.add_output("out", Builder(g).add("scaled_add", x, y, alpha=0.25))
    return g


def test_the_worked_example_is_one_record_plus_one_decomposition(scaled_add):
    assert scaled_add.impl("decompose") is not None
    assert scaled_add.lowering("coreml") is None and scaled_add.lowering("coreai") is None
    g = _graph()
    left = legalize(g, coreai_native)
    assert {n.op for n in left.nodes} == {"add", "mul", "constant"}
    assert all(coreai_native(n) for n in left.nodes)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    with tempfile.TemporaryDirectory() as tmp:
        model, _, _ = lower_graph(g, get_target("iOS17"), "fp32", tmp)
        (got,) = ReferenceProgram(model, tmp).run({"x": x, "y": y}).values()
    want = jax.jit(lambda a, b: a + b * jnp.float32(0.25))(x, y)
    np.testing.assert_array_equal(got, np.asarray(want))
    assert "scaled_add" in OPS


def test_the_example_op_is_gone_after_the_test():
    assert "scaled_add" not in OPS
