"""RLX graph -> a Core AI function: the function boundary (features, rank-0 and bool
travelling as int32 ``[1]`` / int32, as signature.py says) around the ops of ops.py.

The function boundary follows the Core ML format's conventions (rlxjax/signature.py): fp32 /
int32 features of rank >= 1 (a rank-0 input kills the Core AI runtime, so scalars travel as
``[1]``), bool as int32.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ..errors import DynamicShapeError, UnsupportedPrimitiveError
from ..ir import DType, Graph, TensorType, verify
from ..signature import IOSpec, feature_name, unique_names as _unique
from . import ca_private
from .ops import Ctx, lower_nodes
from .ops_base import carried, check_type


def _io_dtype(d: DType) -> DType:
    return DType.f32 if d.is_float else DType.i32


def _check_static(graph: Graph) -> None:
    for name, v in graph.inputs:
        if not v.type.is_static:
            raise DynamicShapeError(f"input '{name}' has a flexible dimension (type {v.type}): "
                                    "format='aimodel' compiles static shapes only (yet)")


def lower_program(program) -> tuple:
    """(AIProgram, input IOSpecs, output IOSpecs) of ``program`` (rlxjax/program.py)."""
    graph = program.graph
    verify(graph)
    _check_static(graph)
    for _, v in graph.inputs + graph.outputs:
        check_type(v.type)
    if not graph.outputs:  # every output made on the host (zero-size, constant)
        raise UnsupportedPrimitiveError("program", None, "a program with no device outputs "
                                        "(all of them zero-size or constant) is not compiled "
                                        "for Core AI yet: Core AI cannot compile a function "
                                        "without outputs")
    if program.states:
        raise UnsupportedPrimitiveError("state", None, "programs with states (state='mlstate') "
                                        "are not lowered for Core AI yet")
    if program.precision != "fp32":
        raise UnsupportedPrimitiveError("precision", None, "format='aimodel' compiles fp32 "
                                        "programs only (yet)")
    names = _unique([feature_name(n) for n, _ in graph.inputs + graph.outputs])
    in_names, out_names = names[:len(graph.inputs)], names[len(graph.inputs):]
    in_specs = [_spec(n, f, v.type) for (n, v), f in zip(graph.inputs, in_names)]
    out_specs = [_spec(n, f, v.type) for (n, v), f in zip(graph.outputs, out_names)]
    ca = ca_private.coreai()
    ctx = Ctx(ca)

    def body(args):
        env: Dict[int, object] = {}
        for (_, v), spec, a in zip(graph.inputs, in_specs, args):
            env[v.id] = _from_io(ctx, a, v.type)
        lower_nodes(ctx, graph.nodes, env)
        return [_to_io(ctx, env[v.id], v.type) for _, v in graph.outputs]

    prog = ca_private.build("main", [(s.mil_name, s.io_shape, s.io_dtype) for s in in_specs],
                            [(s.mil_name, s.io_shape, s.io_dtype) for s in out_specs], body)
    return prog, in_specs, out_specs


def _spec(name: str, feature: str, t: TensorType) -> IOSpec:
    io_t = TensorType(t.shape if t.rank else (1,), _io_dtype(t.dtype))
    return IOSpec(name, feature, tuple(t.shape), t.dtype.np.name, tuple(io_t.shape),
                  io_t.dtype.np.name)


def _from_io(ctx, a, t: TensorType):
    ca = ctx.ca
    if t.dtype == DType.bool:
        a = ca.broadcasting_not_equal(a, ctx.const(0, np.int32))
    elif _io_dtype(t.dtype) != carried(t.dtype):
        a = ca.cast(a, ca_private.dtype(carried(t.dtype).np.name))
    return ctx.reshape(a, ()) if t.rank == 0 else a


def _to_io(ctx, v, t: TensorType):
    ca = ctx.ca
    if t.rank == 0:
        v = ctx.reshape(v, (1,))
    if t.dtype == DType.bool:
        v = ca.cast(v, ca.int32)
    elif _io_dtype(t.dtype) != carried(t.dtype):
        v = ca.cast(v, ca_private.dtype(_io_dtype(t.dtype).np.name))
    return v
