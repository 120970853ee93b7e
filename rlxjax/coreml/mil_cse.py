"""Common-subexpression elimination on the lowered ML Program (the MIL protobuf).

Lowering rules emit each RLX node on its own, so the same MIL computation can appear more
than once: a norm's backward op recomputes the statistics its forward op already computed,
``x * x`` of a cube reappears in its derivative, the same bias reshape is emitted for the
forward and the backward pass. An op whose type, inputs (after renaming), attributes (its
``name`` aside) and declared output types equal those of an earlier op in the same block or
an enclosing one computes the same values; it is dropped and its readers read the earlier
op's outputs. That is exact: MIL ops without side effects are deterministic functions of
their inputs. Impure ops (``mil.is_pure``: states, random draws) and ops with nested
blocks are never merged; ops producing a block output are kept (their names are the block's
interface). Duplicate consts are merged the same way.

Cost: one walk, each op's key the size of its serialised inputs, attributes and output types
(inline values are small: big tensors live in the weight file), a dict look-up per op; a
nested block copies the table of what its enclosing blocks computed before it (O(blocks x
ops before them)); each dropped op is one deletion from its block (protobuf, C).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict

from .mil import blocks, is_pure, top_blocks, walk


def _key(op):
    ins = []
    for param in sorted(op.inputs):
        binds = []
        for b in op.inputs[param].arguments:
            if b.WhichOneof("binding") == "name":
                binds.append(("n", b.name))
            else:
                binds.append(("v", b.value.SerializeToString(deterministic=True)))
        ins.append((param, tuple(binds)))
    attrs = tuple((k, op.attributes[k].SerializeToString(deterministic=True))
                  for k in sorted(op.attributes) if k != "name")
    outs = tuple(o.type.SerializeToString(deterministic=True) for o in op.outputs)
    return (op.type, tuple(ins), attrs, outs)


def _rename_inputs(op, rename: Dict[str, str]) -> None:
    for arg in op.inputs.values():
        for b in arg.arguments:
            if b.WhichOneof("binding") == "name" and b.name in rename:
                b.name = rename[b.name]


def _scope(scopes: Dict[int, tuple], block, parent) -> tuple:
    """(block, seen keys, interface names) of ``block``, made on the first pure op found in
    it: walking in pre-order, its enclosing blocks have then seen exactly the ops before
    its control op ``parent``."""
    scope = scopes.get(id(block))
    if scope is None:
        outer = _scope(scopes, parent.block, parent.parent)[1] if parent is not None else {}
        scope = scopes[id(block)] = (block, dict(outer), set(block.outputs))
    return scope


def _cse_top_block(top) -> int:
    """CSE over ``top`` and its nested blocks. A nested block sees what its enclosing
    blocks computed before its control op (its scope starts as a copy of theirs); names
    are one namespace per top block."""
    rename: Dict[str, str] = {}
    scopes: Dict[int, tuple] = {}  # id(block) -> (block, seen keys, interface names)
    dropped = defaultdict(list)    # id(block) -> indices of dropped ops
    for site in walk(top):
        op = site.op
        if rename:  # nothing to rename before the first duplicate
            _rename_inputs(op, rename)
        if not is_pure(op):
            continue
        _, seen, interface = _scope(scopes, site.block, site.parent)
        outs = [o.name for o in op.outputs]
        if not interface.isdisjoint(outs):
            continue
        key = _key(op)
        prev = seen.get(key)
        if prev is not None:
            rename.update(zip(outs, prev))
            dropped[id(site.block)].append(site.index)
        else:
            seen[key] = outs
    for block_id, indices in dropped.items():
        block = scopes[block_id][0]
        for i in reversed(indices):
            del block.operations[i]
    for block in blocks(top):
        for i, name in enumerate(block.outputs):
            if name in rename:
                block.outputs[i] = rename[name]
    return sum(len(v) for v in dropped.values())


def mil_cse(model) -> int:
    """Merge duplicate ops in every function of ``model`` (a Model_pb2.Model with an
    mlProgram) in place; returns how many ops were removed."""
    return sum(_cse_top_block(top) for top in top_blocks(model))
