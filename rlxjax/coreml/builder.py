"""A small builder of MIL operations that serialises straight to coremltools' protobuf.

Ops are kept as plain Python records while lowering (so a var can be renamed to a graph
output's name once the lowering knows it) and turned into ``MIL_pb2.Operation`` at the end.
Constants with ten or more elements go to the weight blob, as coremltools does.

The builder does not evaluate ops: constant folding happens before lowering, on the RLX
graph (transforms/fold), with the RLX ops' own semantics rather than the reference
interpreter's (the interpreter is the oracle that checks this lowering).
"""
from __future__ import annotations

import functools
import itertools
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from coremltools.proto import MIL_pb2

from ..ir import DType, TensorType
from ..ir.graph import param_key
from ..ir.types import Typed
from ..weightstore import release
from .ct_private import (blob_file_value, scalar_value, set_string_value, tensor_value,
                         tensor_value_type)

BLOB_MIN_ELEMENTS = 10
# A filled tensor up to this size is a constant; a larger one a ``fill`` op, so that the
# weights do not grow with it (transforms/fold.FOLD_MAX_GROWTH is the same policy).
FILL_CONST_MAX = 256
WEIGHT_FILE = "weight.bin"

_PROTO_DTYPE = {
    DType.f32: MIL_pb2.FLOAT32,
    DType.f16: MIL_pb2.FLOAT16,
    DType.i32: MIL_pb2.INT32,
    DType.bool: MIL_pb2.BOOL,
    DType.i8: MIL_pb2.INT8,
    DType.u8: MIL_pb2.UINT8,
}
_SUB_BYTE = {"int4": MIL_pb2.INT4, "uint4": MIL_pb2.UINT4}
# int8 / uint8: MIL's cast takes them from iOS17; only the iOS26 program boundary casts to
# int8 (inside, rlxjax carries them as int32: coreml/smallint.py).
_MIL_CAST_NAME = {DType.f32: "fp32", DType.f16: "fp16", DType.i32: "int32", DType.bool: "bool",
                  DType.i8: "int8", DType.u8: "uint8"}


@functools.lru_cache(maxsize=4096)
def value_type(t: TensorType) -> MIL_pb2.ValueType:
    """The MIL ``ValueType`` of ``t``, made once per type: shared, so copy it (``CopyFrom``,
    or as a field of a new message), never change it."""
    return tensor_value_type(t.shape, _PROTO_DTYPE[t.dtype])


def cast_name(d: DType) -> str:
    return _MIL_CAST_NAME[d]


class Var(Typed):
    """A MIL value during lowering: its name and type."""

    __slots__ = ("name", "type", "producer")

    def __init__(self, name: str, type: TensorType, producer: Optional["_Op"]):
        self.name = name
        self.type = type
        self.producer = producer

    def __repr__(self):
        return f"{self.name}:{self.type}"


class _Op:
    __slots__ = ("type", "inputs", "outputs", "attrs", "blocks")

    def __init__(self, type, inputs, outputs, attrs, blocks=()):
        self.type = type
        self.inputs = inputs    # name -> Var | list[Var]
        self.outputs = outputs  # list[Var]
        self.attrs = attrs      # extra attributes (const "val")
        self.blocks = list(blocks)  # nested blocks (cond, while_loop)


class Block:
    """A nested MIL block under construction: its input vars, ops and output vars."""

    __slots__ = ("inputs", "ops", "outputs")

    def __init__(self, inputs: List[Var]):
        self.inputs = inputs
        self.ops: List[_Op] = []
        self.outputs: List[Var] = []


Operand = Union[Var, Sequence[Var], np.ndarray, bool, int, float, str]


class MilBuilder:
    def __init__(self, blob_writer_factory):
        self.ops: List[_Op] = []
        self._counter = itertools.count()
        self._used_names: set = set()
        self._const_cache: Dict[tuple, Var] = {}
        self._blob_writer_factory = blob_writer_factory
        self._blob = None
        self._known: Dict[int, object] = {}  # id(Var) -> value of a constant
        self._root = self.ops       # constants always go here: visible in every block
        self._blocks: List[Block] = []  # open nested blocks, innermost last

    # -- names ---------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        while True:
            name = f"{hint}_{next(self._counter)}"
            if name not in self._used_names:
                self._used_names.add(name)
                return name

    def reserve(self, name: str) -> None:
        if name in self._used_names:
            raise ValueError(f"MIL name {name!r} used twice")
        self._used_names.add(name)

    def rename(self, var: Var, name: str) -> None:
        """Give an op-produced var its final (graph output) name."""
        self.reserve(name)
        self._used_names.discard(var.name)
        var.name = name

    # -- constants -----------------------------------------------------------------
    def const(self, value, dtype: Optional[DType] = None, *, foldable: bool = True,
              derived: bool = False) -> Var:
        """A const op of ``value`` (one per distinct content). ``foldable=False``: the
        rules may not compute with its value (``known`` is None), so a reshape or transpose
        of it stays an op instead of becoming a second constant - a frozen weight is stored
        once (rules/constexpr.py). ``derived=True``: a weight a rule computed for one op
        (linear's transposed kernel): an equal constant already made is reused (a tied
        embedding and its transpose are stored once); else it is written to the weight
        file at once and not kept for later merging (its key would hold a copy: a model's
        worth of transposed kernels in memory until the end of the lowering)."""
        arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype.np)
        if arr.dtype.kind == "U":
            key = ("str", str(arr))
        else:
            key = param_key(arr)  # (by content, without a copy of a large array's bytes)
        if not foldable:
            key = ("opaque", key)
        hit = self._const_cache.get(key)
        if hit is not None:
            return hit
        if arr.dtype.kind == "U":
            val = scalar_value(str(arr))
            t = None
        else:
            t = TensorType(arr.shape, _dtype_of(arr))
            # A weight-file constant is written by close_blob, and only if some op reads it
            # (a rule may replace it by a derived constant: linear's transposed weight).
            pending = _in_blob(arr, t) and not derived
            val = _PendingBlob(arr, t) if pending else self._const_value(arr, t)
        var = Var(self.fresh("const"), t, None)
        op = _Op("const", {}, [var], {"val": val})
        var.producer = op
        self._root.append(op)
        if derived:  # not kept for later merging: its key may hold a copy of the array
            return var
        self._const_cache[key] = var
        if foldable:
            self._known[id(var)] = str(arr) if arr.dtype.kind == "U" else arr
        return var

    def full(self, t: TensorType, value) -> Var:
        """A tensor of type ``t`` filled with ``value``: a constant when small (or bool:
        MIL's fill takes numbers only), else a ``fill`` op."""
        if t.dtype == DType.bool or t.size <= FILL_CONST_MAX:
            return self.const(np.full(tuple(t.shape), value, t.dtype.np))
        return self.op("fill", t, shape=np.asarray(t.shape, np.int32),
                       value=np.asarray(value, t.dtype.np))

    def _const_value(self, arr: np.ndarray, t: TensorType) -> MIL_pb2.Value:
        if _in_blob(arr, t):
            offset = self._write_blob(arr)
            return blob_file_value(f"@model_path/weights/{WEIGHT_FILE}", offset, arr.shape,
                                   _PROTO_DTYPE[t.dtype])
        if arr.ndim == 0:  # tensor_value would declare a rank-1 [1] tensor
            return scalar_value(arr[()])
        return tensor_value(np.ascontiguousarray(arr))

    def _write_blob(self, arr: np.ndarray) -> int:
        if self._blob is None:
            self._blob = self._blob_writer_factory()
        write = {np.dtype(np.float32): self._blob.write_float_data,
                 np.dtype(np.float16): lambda f: self._blob.write_fp16_data(f.view(np.uint16)),
                 np.dtype(np.int32): self._blob.write_int32_data,
                 np.dtype(np.int8): self._blob.write_int8_data,
                 np.dtype(np.uint8): self._blob.write_uint8_data}.get(arr.dtype)
        if write is None:
            raise TypeError(f"no blob encoding for {arr.dtype}")
        offset = write(np.ascontiguousarray(arr).reshape(-1))
        release(arr)  # a frozen weight read from its store: its pages leave the process
        return offset

    def constexpr(self, type: str, out_type: TensorType, values: dict,
                  as_attributes: bool) -> Var:
        """Append a Core ML ``constexpr_*`` op (decompressed when the model loads) whose
        parameters are the constant ``values`` (name -> array, str, or ``(array, "int4" |
        "uint4")`` for sub-byte data, always stored in the weight file). As coremltools
        serialises them: attributes before iOS18 (``as_attributes``), value-bound inputs
        from iOS18."""
        vals = {k: self._constexpr_value(v) for k, v in values.items()}
        var = Var(self.fresh(type), out_type, None)
        op = _Op(type, {} if as_attributes else vals, [var], vals if as_attributes else {})
        var.producer = op
        self._root.append(op)
        return var

    def _constexpr_value(self, v) -> MIL_pb2.Value:
        if isinstance(v, str):
            return scalar_value(v)
        if isinstance(v, tuple):  # sub-byte data
            arr, kind = v
            if self._blob is None:
                self._blob = self._blob_writer_factory()
            flat = np.ascontiguousarray(arr).reshape(-1)
            # (no copy of data already int8 / uint8: a 1B model's embedding is 250 MiB)
            offset = (self._blob.write_int4_data(np.asarray(flat, np.int8)) if kind == "int4"
                      else self._blob.write_uint4_data(np.asarray(flat, np.uint8)))
            release(arr)
            return blob_file_value(f"@model_path/weights/{WEIGHT_FILE}", offset, arr.shape,
                                   _SUB_BYTE[kind])
        arr = np.asarray(v)
        if arr.dtype == np.uint32:  # (lut_to_dense's shape: no blob encoding, small)
            return tensor_value(arr)
        return self._const_value(arr, TensorType(arr.shape, _dtype_of(arr)))

    def close_blob(self) -> None:
        """Write the weight-file constants some op reads (dropping the unread ones), then
        close the weight file. Call once, after the last op."""
        read = set()

        def reads(ops):
            for op in ops:
                for v in op.inputs.values():
                    read.update(id(x) for x in (v if isinstance(v, list) else [v]))
                for blk in op.blocks:
                    read.update(id(x) for x in blk.outputs)
                    reads(blk.ops)

        reads(self._root)
        kept = []
        for op in self._root:
            val = op.attrs.get("val") if op.type == "const" else None
            if isinstance(val, _PendingBlob):
                if id(op.outputs[0]) not in read:
                    continue
                op.attrs["val"] = self._const_value(val.arr, val.type)
            kept.append(op)
        self._root[:] = kept
        self._blob = None  # the writer flushes on destruction

    # -- operations ----------------------------------------------------------------
    def _operand(self, v: Operand):
        if isinstance(v, Var):
            return v
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, Var) for x in v):
            return list(v)
        if isinstance(v, str):
            return self.const(np.str_(v))
        if isinstance(v, (bool, np.bool_)):
            return self.const(np.bool_(v))
        return self.const(v)

    def op(self, type: str, out_types: Union[TensorType, Sequence[TensorType]],
           **inputs: Operand):
        """Append a MIL op; ``inputs`` are vars or values (which become constants)."""
        single = isinstance(out_types, TensorType)
        types = [out_types] if single else list(out_types)
        ins = {k: self._operand(v) for k, v in inputs.items() if v is not None}
        outs = [Var(self.fresh(type), t, None) for t in types]
        op = _Op(type, ins, outs, {})
        for o in outs:
            o.producer = op
        self.ops.append(op)
        return outs[0] if single else tuple(outs)

    def known(self, var: Var):
        """The value of ``var`` if it is a constant, else None."""
        return self._known.get(id(var))

    # -- nested blocks ---------------------------------------------------------------
    def begin_block(self, input_types: Sequence[TensorType] = ()) -> List[Var]:
        """Open a nested block; ops go into it until ``end_block``. Returns its input vars."""
        inputs = [Var(self.fresh("blk_in"), t, None) for t in input_types]
        blk = Block(inputs)
        self._blocks.append(blk)
        self.ops = blk.ops
        return inputs

    def end_block(self, outputs: Sequence[Var]) -> Block:
        """Close the innermost block with ``outputs``. A value the block did not compute
        itself (one of its inputs, a constant, an outer value) or one returned twice is
        passed through an identity op, so every block output is produced in the block."""
        blk = self._blocks[-1]
        own = {id(o) for op in blk.ops for o in op.outputs if op.type != "const"}
        seen: set = set()
        for v in outputs:
            if id(v) not in own or id(v) in seen:
                v = self.op("identity", v.type, x=v)
            seen.add(id(v))
            blk.outputs.append(v)
        self._blocks.pop()
        self.ops = self._blocks[-1].ops if self._blocks else self._root
        return blk

    def op_with_blocks(self, type: str, out_types: Sequence[TensorType],
                       blocks: Sequence[Block], **inputs: Operand):
        """Append a control-flow op (``cond``, ``while_loop``) carrying nested blocks."""
        ins = {k: self._operand(v) for k, v in inputs.items() if v is not None}
        outs = [Var(self.fresh(type), t, None) for t in out_types]
        op = _Op(type, ins, outs, {}, blocks)
        for o in outs:
            o.producer = op
        self.ops.append(op)
        return tuple(outs)

    # -- serialisation -------------------------------------------------------------
    def write_ops(self, block: MIL_pb2.Block) -> None:
        """Append the ops, serialised, to ``block.operations`` (made in place: no copies)."""
        _write_ops(self.ops, block)


class _PendingBlob:
    """A weight-file constant's value until close_blob writes it."""

    def __init__(self, arr: np.ndarray, type: TensorType):
        self.arr, self.type = arr, type


def _in_blob(arr: np.ndarray, t: TensorType) -> bool:
    return arr.size >= BLOB_MIN_ELEMENTS and t.dtype != DType.bool


def _dtype_of(arr: np.ndarray) -> DType:
    from ..ir import dtype_from_numpy

    return dtype_from_numpy(arr.dtype)


def _write_ops(ops: List[_Op], block: MIL_pb2.Block) -> None:
    add = block.operations.add
    for op in ops:
        _write_op(op, add(type=op.type))


def _write_op(op: _Op, p: MIL_pb2.Operation) -> None:
    for k, v in op.inputs.items():  # each a binding by name: a var, or a list of vars
        add = p.inputs[k].arguments.add
        if isinstance(v, MIL_pb2.Value):  # a value-bound input (iOS18 constexpr ops)
            add(value=v)
        elif isinstance(v, list):
            for x in v:
                add(name=x.name)
        else:
            add(name=v.name)
    for o in op.outputs:
        if o.type is None:  # string const
            vt = op.attrs["val"].type
        else:
            vt = value_type(o.type)
        p.outputs.add(name=o.name, type=vt)
    if op.outputs:  # an op without outputs (write_state) carries its name in attrs
        set_string_value(p.attributes["name"], op.outputs[0].name)
    for k, v in op.attrs.items():
        p.attributes[k].CopyFrom(v)
    for blk in op.blocks:
        sub = p.blocks.add(
            inputs=[MIL_pb2.NamedValueType(name=v.name, type=value_type(v.type))
                    for v in blk.inputs],
            outputs=[v.name for v in blk.outputs])
        _write_ops(blk.ops, sub)
