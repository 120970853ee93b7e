"""A Core AI program's values for the memory analysis (rlxjax/memory.py), read from its
``coreai`` module: each value's tensor type gives its bytes (MLIR ``tensor<2x3xf32>``).

Weights, as for Core ML (rlxjax/coreml/memory.py):

* **stored**: every ``coreai.constant`` - the bytes the ``.aimodel`` holds (a compressed
  frozen weight's int8 / uint8 payload and its scales or look-up table, rlxjax/coreai/
  weights.py); a splat (one repeated value: the zero points) is one value, and equal
  dense constants, which MLIR keeps once, count once;
* **materialised**: what the program computes with - a constant read by an ordinary op,
  and the fp32 result of a decompression (``blockwise_shift_scale``, ``lut_to_dense`` or
  ``cast`` of constants alone), counted as held for the whole call like a Core ML
  ``constexpr_`` result (whether the runtime decompresses once at load or at each call, the
  dense values must exist when the ops reading them run).

A graph's tensor inputs are the arguments, its ``!coreai.handle`` inputs the states; a state
a ``write_handle`` writes is updated in place (the alias bytes). Nested regions (``while``,
``if``) are blocks as in the Core ML reader.
"""
from __future__ import annotations

import re
from typing import Dict

from .. import memory
from ..errors import DynamicShapeError

#: ops that decompress a frozen weight when their operands are all constants (weights.py)
DECOMPRESS = ("blockwise_shift_scale", "lut_to_dense", "cast")
_TENSOR = re.compile(r"tensor<((?:[0-9?]+x)*)([a-z]+)(\d+)>")


def type_bytes(t, where: str) -> int:
    """Bytes of a value of MLIR type ``t`` (a handle counts its tensor; tokens 0)."""
    m = _TENSOR.search(str(t))
    if m is None:
        return 0
    dims = [d for d in m.group(1).split("x") if d]
    if "?" in dims:
        raise DynamicShapeError(
            f"memory_analysis needs fixed shapes, but {where} has an unknown dimension "
            "(a flexible input): analyse a program compiled for the sizes you will run")
    n = 1
    for d in dims:
        n *= int(d)
    bits = int(m.group(3))
    return (n * (8 if bits == 1 else bits) + 7) // 8


def _elements(t) -> int:
    m = _TENSOR.search(str(t))
    n = 1
    for d in (m.group(1).split("x") if m else ()):
        n *= int(d) if d and d != "?" else 1
    return n


class Reader:
    def __init__(self):
        self.names: Dict[object, str] = {}
        self.constants = set()
        self.stored = 0
        self.materialised = 0
        self.weight_names = set()  # constants and decompressed weights: held, not ops
        self.updated = set()
        self.sizes: Dict[str, int] = {}  # constant -> bytes
        self.seen = set()  # the constants' attributes counted

    def name(self, value) -> str:
        n = self.names.get(value)
        if n is None:
            n = self.names[value] = f"%{len(self.names)}"
        return n

    def op(self, op):
        """The ``memory.Op`` of one operation; None for a weight (held for the call)."""
        kind = op.name.rpartition(".")[2]
        outs = tuple((self.name(r), type_bytes(r.type, f"a result of {op.name}"))
                     for r in op.results)
        reads = tuple(self.name(v) for v in op.operands)
        if kind == "constant":
            self.stored += self._stored_bytes(op, outs)
            self.weight_names.update(n for n, _ in outs)
            self.constants.update(n for n, _ in outs)
            self.sizes.update(outs)
            return None
        if kind in DECOMPRESS and reads and not op.regions and \
                all(r in self.constants for r in reads):
            self.weight_names.update(n for n, _ in outs)
            self.materialised += sum(b for _, b in outs)
            return None
        if kind == "write_handle":
            self.updated.add(reads[0])
        blocks = tuple(self.block(b) for r in op.regions for b in r.blocks)
        return memory.Op(reads, outs, blocks, loop="while" in kind)

    def _stored_bytes(self, op, outs) -> int:
        """Bytes the asset stores for a constant: one element for a splat (a tensor of
        one repeated value: Core AI's zero points), nothing for a value already counted
        (MLIR keeps one copy of equal dense constants), else its tensor's bytes."""
        attr = op.attributes["value"] if "value" in op.attributes else None
        if attr is not None:
            if attr in self.seen:
                return 0
            self.seen.add(attr)
            if getattr(attr, "is_splat", False):
                return max(1, outs[0][1] // max(1, _elements(op.results[0].type)))
        return sum(b for _, b in outs)

    def block(self, blk) -> memory.Block:
        ops = list(blk.operations)
        body = [self.op(o.operation) for o in ops[:-1]]
        term = ops[-1].operation if ops else None
        outputs = tuple(self.name(v) for v in term.operands) if term is not None else ()
        return memory.Block(tuple(self.name(a) for a in blk.arguments),
                            tuple(o for o in body if o is not None), outputs)

    def constants_read(self, block: memory.Block) -> set:
        """The constants an ordinary op (or the block's outputs) reads: materialised."""
        names = set(block.outputs)
        for o in block.ops:
            names.update(memory.op_reads(o))
        return names & self.constants


def value_program(program, function: str = "main") -> memory.ValueProgram:
    """The values of graph ``function`` (else the first graph) of the ``AIProgram``."""
    module = program._module._mlir_module  # noqa: SLF001 - read only (ca_private.verify too)
    graphs = [o.operation for o in module.body.operations]
    chosen = [g for g in graphs if str(g.attributes["sym_name"]).strip('"') == function] \
        if all("sym_name" in g.attributes for g in graphs) else []
    graph = (chosen or graphs)[0]
    blk = graph.regions[0].blocks[0]
    reader = Reader()
    arguments: Dict[str, int] = {}
    states: Dict[str, int] = {}
    for a in blk.arguments:
        size = type_bytes(a.type, "an input")
        (states if "handle" in str(a.type) else arguments)[reader.name(a)] = size
    body = reader.block(blk)
    # a constant only a decompression reads is stored, not held dense
    dense = sum(reader.sizes[n] for n in reader.constants_read(body))
    return memory.ValueProgram(arguments, states, frozenset(reader.updated),
                               reader.materialised + dense, body,
                               stored_weights=reader.stored)

