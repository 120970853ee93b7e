"""An ML Program's values for the memory analysis (rlxjax/memory.py), read from the
protobuf: every value's declared type gives its bytes; ``const`` and ``constexpr_*`` results
are the weights as the program holds them (materialised: the decompressed values a
``constexpr_`` op makes at load), and the ``const`` results with the ``constexpr_`` ops'
tensor parameters (their compressed payloads, scales, look-up tables) are the weights as
the package stores them; a state written by ``coreml_update_state`` / ``write_state`` is
updated in place (the alias bytes)."""
from __future__ import annotations

from typing import Dict

from coremltools.proto import MIL_pb2

from .. import memory
from ..errors import DynamicShapeError
from .mil import function_block

#: bits per element of each MIL data type (sub-byte types are packed)
_BITS = {"FLOAT32": 32, "FLOAT16": 16, "BFLOAT16": 16, "FLOAT64": 64, "INT32": 32,
         "INT64": 64, "INT16": 16, "UINT16": 16, "INT8": 8, "UINT8": 8, "BOOL": 8,
         "INT4": 4, "UINT4": 4, "UINT1": 1, "UINT2": 2, "UINT3": 3, "UINT6": 6}
#: the same by the enum's number (what the protobuf holds), every other type 32
_BITS_OF = {MIL_pb2.DataType.Value(k): v for k, v in _BITS.items()
            if k in MIL_pb2.DataType.keys()}


def _bytes(vt, where: str) -> int:
    """Bytes of a value of MIL type ``vt`` (0 for non-tensors: strings, lists)."""
    kind = vt.WhichOneof("type")
    if kind == "stateType":
        return _bytes(vt.stateType.wrappedType, where)
    if kind != "tensorType":
        return 0
    t = vt.tensorType
    count = 1  # a Python int: exact at any size (numpy.prod per value was most of the cost)
    for d in t.dimensions:
        if d.WhichOneof("dimension") != "constant":
            raise DynamicShapeError(
                f"memory_analysis needs fixed shapes, but {where} has an unknown dimension "
                "(a flexible input): analyse a program compiled for the sizes you will run")
        count *= int(d.constant.size)
    return (count * _BITS_OF.get(t.dataType, 32) + 7) // 8


#: state-writing MIL op -> its input naming the state
_STATE_WRITES = {"coreml_update_state": ("state",), "write_state": ("input",)}


class Reader:
    def __init__(self):
        self.weights = 0
        self.stored = 0
        self.constants = set()
        self.updated = set()

    def describe(self, op):
        """The ``memory.Op`` of a MIL operation; None for a constant (a weight)."""
        outs = tuple((o.name, _bytes(o.type, f"value '{o.name}'")) for o in op.outputs)
        if op.type == "const" or op.type.startswith("constexpr_"):
            self.weights += sum(b for _, b in outs)
            self.stored += sum(b for _, b in outs) if op.type == "const" else \
                _payload_bytes(op)
            self.constants.update(n for n, _ in outs)
            return None
        reads = tuple(b.name for arg in op.inputs.values() for b in arg.arguments
                      if b.WhichOneof("binding") == "name")
        for param in _STATE_WRITES.get(op.type, ()):
            self.updated.update(b.name for b in op.inputs[param].arguments)
        nested = tuple(self.block(b) for b in op.blocks)
        return memory.Op(reads, outs, nested, loop=op.type == "while_loop")

    def block(self, blk) -> memory.Block:
        ops = (self.describe(op) for op in blk.operations)
        return memory.Block(tuple(i.name for i in blk.inputs), tuple(o for o in ops if o),
                            tuple(blk.outputs))


def value_program(spec, function: str = "main") -> memory.ValueProgram:
    """The values of ``function`` of the Core ML ``Model`` ``spec``."""
    fn = spec.mlProgram.functions[function]
    arguments: Dict[str, int] = {}
    states: Dict[str, int] = {}
    for nvt in fn.inputs:
        size = _bytes(nvt.type, f"input '{nvt.name}'")
        (states if nvt.type.WhichOneof("type") == "stateType" else arguments)[nvt.name] = size
    reader = Reader()
    body = reader.block(function_block(spec, function))
    return memory.ValueProgram(arguments, states, frozenset(reader.updated), reader.weights,
                               body, stored_weights=reader.stored)


def _payload_bytes(op) -> int:
    """Bytes of a ``constexpr_`` op's tensor parameters (attributes before iOS18,
    value-bound inputs from iOS18)."""
    values = list(op.attributes.values()) + [
        b.value for arg in op.inputs.values() for b in arg.arguments
        if b.WhichOneof("binding") == "value"]
    return sum(_bytes(v.type, f"a parameter of {op.type}") for v in values
               if v.type.WhichOneof("type") == "tensorType")
