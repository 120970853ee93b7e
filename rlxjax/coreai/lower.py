"""RLX graph -> a Core AI function: the function boundary (features, rank-0 and bool
travelling as int32 ``[1]`` / int32, as signature.py says) around the ops of ops.py.

The function boundary follows the Core ML format's conventions (rlxjax/signature.py): fp32 /
int32 features of rank >= 1 (a rank-0 input kills the Core AI runtime, so scalars travel as
``[1]``), bool as int32; an fp16 feature travels as fp32 holding fp16 values, which is also
how the ops carry it (ops_base.py); an fp16 state is an fp16 Core AI state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np

from ..errors import RlxError, UnsupportedPrimitiveError
from ..ir import DType, TensorType, verify
from ..ir.ops import OPS
from ..signature import IOSpec, feature_name, unique_names as _unique
from ..transforms.legalize import legalize
from . import ca_private
from .dynamic import DynCtx, io_shape
from .fp16 import to_fp16
from .ops import Ctx, lower_nodes
from .ops_base import RULES, carried, check_type, native_f16_values, unsupported


#: RLX ops that never reach the Core AI rules, each with where it goes instead
NOT_LOWERED = {
    **{op: "Core AI has no random ops: a program's draws are a host part (random='inputs')"
       for op in ("bernoulli", "random_uniform", "random_normal")},
    "remat": "inlined before lowering (transforms/regions.py)",
    "remat_barrier": "removed before lowering (formats/base.py lowers_remat_barrier)",
}


#: decomposed ops whose composition has no accuracy in fp16: Core AI fp16 values
#: (precision "fp16" / "mixed") are refused by name, not decomposed
FP32_ONLY = ("erfc",)
#: ops whose Core AI rule is float only (its matmul / convolution): integer ones decomposed
FLOAT_ONLY = ("dot_general", "conv")


def native(node, native_f16: bool = False) -> bool:
    """The RLX ops Core AI runs as they are (it has a rule for them, ops.py); the composite
    ops it has none for, and the integer ``FLOAT_ONLY`` ones, are decomposed first
    (rlxjax/transforms/legalize/), but for ``FP32_ONLY`` ops of Core AI fp16 values
    (``native_f16``), left to be refused. The linalg family is decomposed in fp32 only
    (its fp16 results are not measured against JAX): an fp16 one is refused by name here."""
    if node.op in FLOAT_ONLY:
        return any(v.type.dtype.is_float for v in node.inputs)
    if node.op in RULES:
        return True
    if OPS[node.op].family == "linalg":
        for v in list(node.inputs) + list(node.outputs):
            if v.type.dtype.is_float and v.type.dtype != DType.f32:
                raise unsupported(node, f"{node.op} of {v.type.dtype} is not lowered for "
                                        "Core AI")
    return native_f16 and node.op in FP32_ONLY and node.inputs[0].type.dtype == DType.f16


def _io_dtype(d: DType) -> DType:
    return DType.f32 if d.is_float else DType.i32


@dataclass(frozen=True)
class Lowered:
    """A program lowered for Core AI, ready to be built as a function of any name (one
    ``.aimodel`` may hold several, format.py ``save_functions``)."""

    inputs: Tuple[IOSpec, ...]    # the function's tensor inputs
    outputs: Tuple[IOSpec, ...]   # its outputs (not the state writes)
    states: Tuple[IOSpec, ...]    # its states (``name``: the graph input, ``mil_name``: the state)
    body: Callable

    def function(self, name: str) -> "ca_private.Function":
        spec = lambda s: (s.mil_name, io_shape(s.io_shape), s.io_dtype)  # noqa: E731
        return ca_private.Function(name, [spec(s) for s in self.inputs],
                                   [spec(s) for s in self.states],
                                   [spec(s) for s in self.outputs], self.body)


def lower_program(program) -> Lowered:
    """``program`` (rlxjax/program.py) lowered for Core AI. Its states (``Program.states``:
    graph input -> the graph output written back, or None for a state only read) become
    Core AI states (fp32 / int32 / fp16 tensors, read when a call starts and written when
    it ends), neither inputs nor outputs of the function."""
    graph = program.graph
    verify(graph)
    flexible = any(not v.type.is_static for _, v in graph.inputs)
    if program.precision == "fp16":  # fp32 values computed as Core AI fp16 (fp16.py)
        graph = to_fp16(graph)
    f16 = program.precision != "fp32"  # Core AI fp16 values, not fp32-carried ones
    graph = legalize(graph, lambda n: native(n, f16), carried_f16=not f16)
    for _, v in graph.inputs + graph.outputs:
        check_type(v.type)
    if program.precision not in ("fp32", "fp16", "mixed"):
        raise RlxError(f"internal: precision {program.precision!r}")
    bound = dict(program.states or {})
    fn_in = [(n, v) for n, v in graph.inputs if n not in bound]
    st_in = [(n, v) for n, v in graph.inputs if n in bound]
    written = {out: i for i, (n, _) in enumerate(st_in) if (out := bound[n]) is not None}
    fn_out = [(n, v) for n, v in graph.outputs if n not in written]
    if len(st_in) != len(bound) or len(written) != sum(o is not None for o in bound.values()) \
            or len(fn_out) + len(written) != len(graph.outputs):
        raise RlxError(f"internal: states {bound} do not pair graph inputs with outputs")
    for n, v in st_in:
        if v.type.rank == 0 or v.type.dtype not in (DType.f32, DType.f16, DType.i32):
            raise UnsupportedPrimitiveError(
                "state", None, f"state '{n}' is {v.type}: Core AI states here are fp32, "
                "fp16 or int32 tensors of rank >= 1")
    names = _unique([feature_name(n) for n, _ in fn_in + fn_out + st_in])
    k, m = len(fn_in), len(fn_in) + len(fn_out)
    in_specs = tuple(_spec(n, f, v.type) for (n, v), f in zip(fn_in, names[:k]))
    out_specs = tuple(_spec(n, f, v.type) for (n, v), f in zip(fn_out, names[k:m]))
    st_specs = tuple(IOSpec(n, f, tuple(v.type.shape), v.type.dtype.np.name, tuple(v.type.shape),
                            v.type.dtype.np.name) for (n, v), f in zip(st_in, names[m:]))
    # precision "fp16" / "mixed" (a training step's fp16 forward / backward): approximations
    # the user asked for (docs/coreai.md), the graph's f16 values are Core AI fp16 values
    # a flexible range: one function with dynamic dims, shapes computed in it (dynamic.py)
    ctx = (DynCtx if flexible else Ctx)(ca_private.coreai(),
                                        native_f16=program.precision != "fp32")

    def body(args, reads):
        with native_f16_values(ctx.native_f16):
            return _body(args, reads)

    def _body(args, reads):
        env: Dict[int, object] = {}
        if flexible:
            ctx.bind([(v.type, a) for (_, v), a in zip(fn_in, args)])
        for (_, v), a in zip(fn_in, args):
            env[v.id] = _from_io(ctx, a, v.type)
        for (_, v), r in zip(st_in, reads):  # an fp16 state is read into its fp32 carrier
            env[v.id] = (r if v.type.dtype != DType.f16 or ctx.native_f16 else
                         ctx.cast(r, DType.f32))
        lower_nodes(ctx, graph.nodes, env)
        outs = [_to_io(ctx, env[v.id], v.type) for _, v in fn_out]
        writes = {written[n]: _to_state(ctx, env[v.id], v.type)
                  for n, v in graph.outputs if n in written}
        return outs, writes

    return Lowered(in_specs, out_specs, st_specs, body)


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


def _to_state(ctx, v, t: TensorType):
    """A state's new value in the state's own dtype (fp16 values leave their carrier)."""
    return ctx.ca.cast(v, ctx.ca.float16) if t.dtype == DType.f16 and not ctx.native_f16 else v


def _to_io(ctx, v, t: TensorType):
    ca = ctx.ca
    if t.rank == 0:
        v = ctx.reshape(v, (1,))
    if t.dtype == DType.bool:
        v = ca.cast(v, ca.int32)
    elif _io_dtype(t.dtype) != carried(t.dtype):
        v = ca.cast(v, ca_private.dtype(_io_dtype(t.dtype).np.name))
    return v
