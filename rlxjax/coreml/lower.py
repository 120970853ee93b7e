"""RLX graph -> Core ML ``Model_pb2.Model`` holding an ML Program.

The function boundary follows what Core ML's model interface can carry: multi-arrays of
fp32 or int32 (and int8 from iOS26) with rank >= 1. Inside, the program computes in the
graph's own types (or fp16 when ``precision="fp16"``), int8 / uint8 carried as int32
(smallint.py); bool, int8 / uint8 and rank-0 values are converted at the boundary and the
host side (api.py, rlxjax/calling.py) converts them back using ``IOSpec`` (rlxjax/signature.py).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

from ..errors import JAX_NAMES, DynamicShapeError, RlxError, UnsupportedPrimitiveError, op_label
from ..ir import DType, Dyn, Graph, Node, TensorType, verify
from ..signature import IOSpec, feature_name, unique_names as _unique
from . import rules, smallint  # noqa: F401  (registers the lowerings)
from .builder import MilBuilder, Var, cast_name, value_type
from .ct_private import blob_writer
from ..ir.ops import OPS
from ..program import reread_of
from ..transforms.legalize import legalize
from .registry import lowers_natively
from .states import describe_states, state_input, write_state
from .flexible import FlexDims, describe_flexible, lower_flexible
from .targets import INT8_IO, Target

PRECISIONS = ("fp32", "fp16")


#: a pytree-path name as a feature identifier (rlxjax/signature.py)
sanitize = feature_name


def _io_dtype(d: DType, target: Target) -> DType:
    if d == DType.i8 and target.at_least(INT8_IO):
        return DType.i8
    return DType.f32 if d.is_float else DType.i32


_JAX_NAMES = JAX_NAMES  # RLX op -> the JAX primitive errors name (rlxjax/errors.py)


class LowerContext:
    """What a lowering rule gets besides its node: the builder, the target, the precision,
    and whole-graph facts through :meth:`analysis`. It knows no op: what a rule needs to
    know about the rest of the graph, the rule computes itself."""

    def __init__(self, builder: MilBuilder, target: Target, precision: str,
                 graph: Optional[Graph] = None, keep_weight_layout: bool = False):
        self.b = builder
        self.target = target
        self.precision = precision
        self.flex = None  # a program with flexible inputs: flexible.FlexDims
        #: the graph being lowered (its regions included), which analyses read; nodes
        #: lowered one by one without it (tools/primitive_table.py) see an empty graph, so
        #: no rule counts on a fact about the rest of the graph there
        self.graph = graph if graph is not None else Graph()
        #: constants keep the layout they have: no rule stores a derived constant in place
        #: of one (a weight shared with another function of a multifunction package)
        self.keep_weight_layout = keep_weight_layout
        self._analyses: dict = {}

    def analysis(self, fn):
        """``fn(ctx)``, computed the first time a rule asks and kept for the rest of this
        lowering (the graph does not change while it is lowered): a whole-graph fact a rule
        needs, such as which values another node reads (rules/norm.py, rules/linear.py).
        ``fn`` lives with the rule that asks and is its own key: a module-level function."""
        try:
            return self._analyses[fn]
        except KeyError:
            value = self._analyses[fn] = fn(self)
            return value

    def dt(self, d: DType) -> DType:
        """The MIL dtype the program computes values of RLX dtype ``d`` in."""
        return DType.f16 if (self.precision == "fp16" and d == DType.f32) else smallint.carried(d)

    def out_type(self, node: Node, i: int = 0) -> TensorType:
        t = node.outputs[i].type
        return t.with_dtype(self.dt(t.dtype))

    def unsupported(self, node: Node, detail: str) -> UnsupportedPrimitiveError:
        """The error for a node this target cannot lower, naming the JAX primitive the
        user wrote where the RLX op has another name."""
        return UnsupportedPrimitiveError(_JAX_NAMES.get(node.op, node.op), node.source, detail)

    def lower_nodes(self, nodes, env: dict) -> None:
        """Lower ``nodes`` in order into the builder's current block; ``env`` maps RLX
        value ids to MIL vars and receives the nodes' outputs."""
        flex = self.flex
        for node in nodes:
            opdef = OPS.get(node.op)
            fn = opdef.impls.get("lower") if opdef is not None else None
            if fn is None:
                raise self.unsupported(node, "no Core ML lowering for this RLX op")
            if flex is not None and not all(v.type.is_static for v in node.outputs + node.inputs):
                outs = lower_flexible(self, node, fn, [env[v.id] for v in node.inputs])
            else:
                outs = fn(self, node, *[env[v.id] for v in node.inputs])
            outs = outs if isinstance(outs, tuple) else (outs,)
            for i, (v, mv) in enumerate(zip(node.outputs, outs)):
                want = self.out_type(node, i)
                if mv.type != want:
                    raise RlxError(f"internal: lowering of {node.op} gave {mv.type}, "
                                   f"expected {want}")
                if v.type.dtype in smallint.SMALL and smallint.needs_wrap(
                        node.op, node.params.get("mode")):
                    mv = smallint.wrap(self.b, mv, v.type.dtype)
                env[v.id] = mv

    def lower_region(self, region: Graph, inputs) -> List[Var]:
        """Lower a region graph (ir/control.py) on MIL vars ``inputs`` into the current
        block; returns the vars of its outputs."""
        _check_static(region)
        env = {v.id: mv for (_, v), mv in zip(region.inputs, inputs)}
        self.lower_nodes(region.nodes, env)
        return [env[v.id] for _, v in region.outputs]


def _check_static(graph: Graph) -> None:
    for name, v in graph.inputs:
        if not v.type.is_static:
            dyn = [str(d) for d in v.type.shape if isinstance(d, Dyn)]
            raise DynamicShapeError(
                f"input '{name}' has dynamic dimension(s) {', '.join(dyn)} (type {v.type}); "
                "Core ML programs here need static shapes: call with concrete arrays, or "
                "compile one program per shape you need.")
    for n in graph.nodes:
        for v in n.outputs:
            if not v.type.is_static:
                where = f" at {n.source}" if n.source else ""
                raise DynamicShapeError(f"{op_label(n.op)}{where} produces a dynamic shape {v.type}; "
                                        "Core ML lowering needs static shapes.")


def lower_graph(graph: Graph, target: Target, precision: str, weights_dir: str,
                states=None, keep_weight_layout: bool = False):
    """Lower ``graph``; weights go to ``weights_dir``/weight.bin. Returns (model, inputs, outputs).

    ``states`` maps the names of graph inputs that are Core ML states (fp16, iOS18) to the
    graph output written back into each at the end of a call (coreml/states.py), or to
    None for a state the function reads only; those are neither function inputs nor
    outputs in the returned specs. ``keep_weight_layout``: every constant is stored in the
    layout it has (``LowerContext.keep_weight_layout``)."""
    if precision not in PRECISIONS:
        raise RlxError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    verify(graph)
    graph = legalize(graph, lambda n: lowers_natively(n.op, target))  # usually graph itself
    import os

    b = MilBuilder(lambda: blob_writer(os.path.join(weights_dir, "weight.bin")))
    ctx = LowerContext(b, target, precision, graph, keep_weight_layout)
    if not all(v.type.is_static for _, v in graph.inputs):  # flexible inputs
        ctx.flex = FlexDims(b)
    env = {}

    mil_names = _unique([sanitize(n) for n, _ in graph.inputs] +
                        [sanitize(n) for n, _ in graph.outputs])
    in_names, out_names = mil_names[:len(graph.inputs)], mil_names[len(graph.inputs):]

    states = dict(states or {})
    fn_inputs, in_specs, state_specs, state_vars, declared = [], [], [], {}, {}
    for (name, v), mil_name in zip(graph.inputs, in_names):
        again = reread_of(name, states)
        if again is not None:  # one more read of a state (rlxjax/program.py REREAD)
            env[v.id] = b.op("read_state", v.type, input=declared[again])
            continue
        if name in states:
            b.reserve(mil_name)
            nvt, sspec, svar, env[v.id] = state_input(ctx, name, mil_name, v.type)
            declared[name] = svar
            if states[name] is not None:  # None: a state this function only reads
                state_vars[states[name]] = svar
            fn_inputs.append(nvt)
            state_specs.append(sspec)
            continue
        spec, var = _lower_input(ctx, name, mil_name, v.type)
        b.reserve(mil_name)
        if ctx.flex is not None:
            ctx.flex.add_input(var, v.type)
        fn_inputs.append(MIL_pb2.NamedValueType(name=mil_name, type=value_type(var.type)))
        in_specs.append(spec)
        env[v.id] = _from_io(ctx, var, v.type)

    if ctx.flex is not None:
        ctx.flex.emit_symbols()
    ctx.lower_nodes(graph.nodes, env)

    out_specs, block_outputs, renamed, writes = [], [], set(), []
    for (name, v), mil_name in zip(graph.outputs, out_names):
        if name in state_vars:
            writes.append((state_vars.pop(name), env[v.id]))
            continue
        var = _to_io(ctx, env[v.id], v.type.dtype, mil_name, renamed)
        block_outputs.append(var.name)
        out_specs.append(IOSpec(name, mil_name, _named(v.type.shape), v.type.dtype.np.name,
                                _named(var.type.shape), var.type.dtype.np.name))
    if state_vars or len(state_specs) != len(states):
        raise RlxError(f"internal: states {states} do not pair graph inputs with outputs")
    for state_var, value in writes:  # after everything else: each read sees the old value
        write_state(b, state_var, value)
    b.close_blob()

    model = _model_proto(target, fn_inputs, b, block_outputs, in_specs, out_specs)
    if state_specs:
        describe_states(model, state_specs)
    return model, in_specs, out_specs


def _lower_input(ctx, name, mil_name, t: TensorType):
    io_t = TensorType(t.shape if t.rank else (1,), _io_dtype(t.dtype, ctx.target))
    bounds = () if t.is_static else tuple(d.bounds or (1, -1) if isinstance(d, Dyn) else None
                                          for d in t.shape)
    spec = IOSpec(name, mil_name, _named(t.shape), t.dtype.np.name, _named(io_t.shape),
                  io_t.dtype.np.name, bounds)
    return spec, Var(mil_name, io_t, None)


def _named(shape) -> tuple:
    """A shape for an IOSpec: a flexible dim by its name."""
    return tuple(d.name if isinstance(d, Dyn) else d for d in shape)


def _from_io(ctx, var: Var, t: TensorType) -> Var:
    """Function input as Core ML delivers it -> the value the graph expects."""
    b = ctx.b
    want = ctx.dt(t.dtype)
    if want == DType.bool:
        var = b.op("not_equal", TensorType(var.shape, DType.bool), x=var, y=np.int32(0))
    elif want != var.dtype:  # (the cast first: MIL's reshape takes no int8 before iOS17)
        var = b.op("cast", TensorType(var.shape, want), x=var, dtype=cast_name(want))
    if t.rank == 0:
        var = b.op("reshape", TensorType((), var.dtype), x=var, shape=np.zeros((0,), np.int32))
    return var


def _to_io(ctx, var: Var, dtype: DType, mil_name: str, renamed: set) -> Var:
    """A graph output value (of RLX dtype ``dtype``) -> a block output named ``mil_name``
    that Core ML can return."""
    b = ctx.b
    io_dtype = _io_dtype(dtype, ctx.target)
    known = b.known(var)
    if known is not None:  # a constant output: converted here, not by ops on a constant
        var = b.const(np.asarray(known, io_dtype.np).reshape(var.shape or (1,)))
    if var.type.rank == 0:
        var = b.op("reshape", TensorType((1,), var.dtype), x=var, shape=np.asarray([1], np.int32))
    if var.dtype != io_dtype:
        var = b.op("cast", TensorType(var.shape, io_dtype), x=var, dtype=cast_name(io_dtype))
    # Rename the producing op's output in place when it is ours alone; a function input,
    # a (shared, cached) constant or a value already named as another output gets an
    # identity op carrying the output name instead.
    own = var.producer is not None and var.producer.type != "const" and id(var) not in renamed
    if not own:
        var = b.op("identity", var.type, x=var)
    b.rename(var, mil_name)
    renamed.add(id(var))
    return var


_ARRAY_DTYPE = {"float32": FeatureTypes_pb2.ArrayFeatureType.FLOAT32,
                "int32": FeatureTypes_pb2.ArrayFeatureType.INT32,
                "int8": FeatureTypes_pb2.ArrayFeatureType.INT8}


def _feature(spec: IOSpec) -> Model_pb2.FeatureDescription:
    if spec.flexible:
        arr = FeatureTypes_pb2.ArrayFeatureType(dataType=_ARRAY_DTYPE[spec.io_dtype])
        describe_flexible(arr, spec.io_shape, spec.bounds or None)
    else:
        arr = FeatureTypes_pb2.ArrayFeatureType(
            shape=list(spec.io_shape),
            dataType=_ARRAY_DTYPE[spec.io_dtype])
    return Model_pb2.FeatureDescription(name=spec.mil_name, shortDescription=spec.name,
                                        type=FeatureTypes_pb2.FeatureType(multiArrayType=arr))


def _model_proto(target, fn_inputs, b, block_outputs, in_specs, out_specs) -> Model_pb2.Model:
    model = Model_pb2.Model(specificationVersion=target.spec_version)
    model.description.input.extend(_feature(s) for s in in_specs)
    model.description.output.extend(_feature(s) for s in out_specs)
    model.mlProgram.version = 1
    fn = model.mlProgram.functions["main"]  # built in place: a program is not copied
    fn.inputs.extend(fn_inputs)
    fn.opset = target.opset
    block = fn.block_specializations[target.opset]
    block.outputs.extend(block_outputs)
    b.write_ops(block)
    return model
