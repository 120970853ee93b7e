"""The one node builder (rlxjax/ir/builder.py): every node, constants included, carries
the user's source line through tracing, the grad transform and the passes."""
import os

import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from rlxjax.frontend.interpreter import Lowering
from rlxjax.ir import DType, Graph, TensorType
from rlxjax.ir.builder import Builder
from rlxjax.transforms.regions import all_regions

THIS_FILE = os.path.basename(__file__)
W = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)  # closed over: a constant


def _layer_norm(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5)


def _loss(p, x):
    h = _layer_norm(x @ p["w"] + p["b"])              # recognised as a layer_norm node
    h = jax.nn.relu(h) + jax.nn.gelu(h) + h @ W        # relu: a custom_jvp call
    q, k, v = jnp.split(jnp.concatenate([h, h, h], -1) * 0.5, 3, axis=-1)
    h = jax.nn.softmax(q * k, axis=-1) + v             # split's backward: concat_pad_sums

    def body(c, xs):
        return jnp.tanh(c * 2.0 + xs), c.sum()

    c, ys = jax.lax.scan(body, h[0], h)                # regions
    return jnp.mean(h ** 2) + c.sum() + ys.sum()


def _args():
    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((4, 4)).astype(np.float32),
         "b": rng.standard_normal(4).astype(np.float32)}
    return p, rng.standard_normal((3, 4)).astype(np.float32)


def _unsourced(graph):
    return [(g.name, n.op, n.source) for g in [graph, *all_regions(graph)] for n in g.nodes
            if not n.source or THIS_FILE not in n.source]


def test_every_node_points_into_the_users_file():
    p, x = _args()
    for f in (rlxjax.coreml_jit(_loss), rlxjax.coreml_grad(_loss)):
        graph = f.lower(p, x).graph
        ops = {n.op for n in graph.nodes}
        assert "constant" in ops and "layer_norm" in ops and "scan" in ops
        assert _unsourced(graph) == []


def test_grad_nodes_take_the_line_of_the_node_they_differentiate():
    p, x = _args()
    graph = rlxjax.coreml_grad(_loss).lower(p, x).graph
    grads = [n for n in graph.nodes if n.op == "layer_norm_grad"]
    assert grads and all(f"{THIS_FILE}:" in n.source for n in grads)
    forward = next(n for n in graph.nodes if n.op == "layer_norm")
    assert grads[0].source == forward.source


def test_at_sets_and_restores_the_source():
    g = Graph()
    x = g.add_input("x", TensorType((2,), DType.f32))
    b = Builder(g, "outer.py:1")
    with b.at("inner.py:2") as inner:
        assert inner is b
        y = b.add("exp", x)
        c = b.constant(np.float32(2))
        with b.at(None):
            z = b.add("neg", y)
    w = b.add("mul", y, c)
    assert [y.node.source, c.node.source, z.node.source, w.node.source] == \
        ["inner.py:2", "inner.py:2", None, "outer.py:1"]
    assert b.scalar(3, like=x).dtype == DType.f32 and b.zeros(x.type).shape == (2,)


def test_uint32_constants_are_carried_as_int32_with_their_range():
    g = Graph()
    ctx = Lowering(g)
    v = ctx.constant(np.array([3, 7], np.uint32))
    assert v.dtype == DType.i32 and ctx.u32_ranges[v.id] == (3, 7)
    w = Builder(g).constant(np.array([1], np.int32))
    assert w.id not in ctx.u32_ranges
