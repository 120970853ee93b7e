"""``precision="fp16"`` on Core AI (docs/coreai.md): the program's fp32 values computed as
Core AI fp16 values, as the Core ML format's whole-program switch does.

The Core ML lowering maps every f32 type to fp16 as it emits MIL (coreml/lower.py); the
Core AI rules read their dtypes from the RLX types, so here the RLX graph itself is
retyped: its inputs and outputs keep their fp32 features (converted to fp16 on entry and
back on exit, states too), f32 constants become fp16 (values beyond fp16's range become
±inf, as in Core ML's fp16 programs), f32 dtype parameters (``convert``) fp16, and every
node's type is inferred again. The lowering then takes the f16 values as Core AI fp16
(``Ctx.native_f16``); ops with fp32-only Core AI rules stay refused by name.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType, Graph

F32, F16 = DType.f32, DType.f16


def _param(v):
    if v is F32 or (isinstance(v, DType) and v == F32):
        return F16
    if isinstance(v, tuple):
        return tuple(_param(x) for x in v)
    return v


def _node_params(node):
    if node.op == "constant":
        value = node.params["value"]
        if value.dtype == np.float32:
            with np.errstate(over="ignore"):
                return {"value": value.astype(np.float16)}
        return dict(node.params)
    return {k: _param(v) for k, v in node.params.items()}


def _body(new: Graph, graph: Graph, env: dict) -> None:
    for node in graph.nodes:
        regions = {k: tuple(_region(g) for g in r) if isinstance(r, tuple) else _region(r)
                   for k, r in node.regions.items()}
        out = new.add_node(node.op, [env[v.id] for v in node.inputs], _node_params(node),
                           node.source, regions or None)
        env.update((v.id, w) for v, w in zip(node.outputs, out.outputs))


def _region(graph: Graph) -> Graph:
    """A region (control flow body) retyped: its f32 inputs and outputs are fp16 too."""
    new = Graph(graph.name)
    env = {v.id: new.add_input(n, v.type.with_dtype(F16) if v.type.dtype == F32 else v.type)
           for n, v in graph.inputs}
    _body(new, graph, env)
    for n, v in graph.outputs:
        new.add_output(n, env[v.id])
    return new


def to_fp16(graph: Graph) -> Graph:
    """``graph`` computing its fp32 values in fp16, its inputs and outputs still fp32."""
    new = Graph(graph.name)
    env = {}
    for n, v in graph.inputs:
        x = new.add_input(n, v.type)
        env[v.id] = (new.add_node("convert", [x], {"dtype": F16}).output
                     if v.type.dtype == F32 else x)
    _body(new, graph, env)
    for n, v in graph.outputs:
        y = env[v.id]
        new.add_output(n, new.add_node("convert", [y], {"dtype": F32}).output
                       if v.type.dtype == F32 else y)
    return new
