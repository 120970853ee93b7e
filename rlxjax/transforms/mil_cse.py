"""Common-subexpression elimination on the lowered ML Program (the MIL protobuf).

Lowering rules emit each RLX node on its own, so the same MIL computation can appear more
than once: a norm's backward op recomputes the statistics its forward op already computed,
``x * x`` of a cube reappears in its derivative, the same bias reshape is emitted for the
forward and the backward pass. An op whose type, inputs (after renaming), attributes (its
``name`` aside) and declared output types equal those of an earlier op in the same block or
an enclosing one computes the same values; it is dropped and its readers read the earlier
op's outputs. That is exact: MIL ops without side effects are deterministic functions of
their inputs. Ops with side effects or randomness (states, random draws) and ops with nested
blocks are never merged; ops producing a block output are kept (their names are the block's
interface). Duplicate consts are merged the same way.
"""
from __future__ import annotations

from typing import Dict

#: op types that are never merged (side effects, or a fresh draw on every execution)
_IMPURE_PREFIXES = ("random_",)
_IMPURE = {"read_state", "write_state", "coreml_update_state"}


def _pure(op) -> bool:
    return not (op.blocks or op.type in _IMPURE or op.type.startswith(_IMPURE_PREFIXES))


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


def _cse_block(block, rename: Dict[str, str], outer_seen: dict) -> int:
    seen = dict(outer_seen)
    interface = set(block.outputs)
    dropped, removed = [], 0
    for i, op in enumerate(block.operations):
        _rename_inputs(op, rename)
        for sub in op.blocks:
            removed += _cse_block(sub, rename, seen)
        if not _pure(op):
            continue
        outs = [o.name for o in op.outputs]
        if interface.isdisjoint(outs):
            key = _key(op)
            prev = seen.get(key)
            if prev is not None:
                rename.update(zip(outs, prev))
                dropped.append(i)
                continue
            seen[key] = outs
    for i in reversed(dropped):
        del block.operations[i]
    removed += len(dropped)
    for i, name in enumerate(block.outputs):
        if name in rename:
            block.outputs[i] = rename[name]
    return removed


def mil_cse(model) -> int:
    """Merge duplicate ops in every function of ``model`` (a Model_pb2.Model with an
    mlProgram) in place; returns how many ops were removed."""
    removed = 0
    for fn in model.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            removed += _cse_block(block, {}, {})
    return removed
