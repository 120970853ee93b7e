"""Peephole on the lowered ML Program: fuse a constant bias add into the ``linear`` before it.

A Dense layer with constant parameters lowers to ``linear(x, weight)`` (rules/linear.py)
followed by the RLX ``add`` of its bias, lowered on its own: ``add(linear_out, b)``. When
``b`` is a const of shape ``[N]`` (or ``[1, ..., 1, N]``: broadcast on the last axis only)
and the add is the linear's only reader, the pair is one ``linear(x, weight, bias=b)``:
the same values, since MIL's linear adds its bias to each finished dot product (as the
add did) and the reshape of the bias to ``[N]`` keeps its data. The fused op takes the
add's output name (it may be a block output), so no reader needs renaming.

Done here rather than at lowering because only the whole program tells whether the
linear's output has other readers (a graph output, a nested block, a backward pass).

Cost: one walk of the op types, O(n) (a program without a ``linear`` stops there); then
the index (mil_peephole.py) and one walk, O(n + the values read); each fused pair O(1)
protobuf copies, each dropped op one deletion (protobuf, C).
"""
from __future__ import annotations

from .mil import operations, top_blocks, walk
from .mil_peephole import dims as _dims, fresh as _fresh, index as _index, set_name as _set_name
from .mil_peephole import single_name as _single_name


def _set_dims(vtype, dims):
    t = vtype.tensorType
    del t.dimensions[:]
    for d in dims:
        t.dimensions.add().constant.size = d
    t.rank = len(dims)


def _fits(add, lin, const):
    """Whether ``const`` (the add's other operand) is a bias ``[N]`` / ``[1, ..., N]`` of the
    linear's dtype and the add's output type is the linear's."""
    out_dims, b_dims = _dims(lin.outputs[0].type), _dims(const.outputs[0].type)
    same = lambda a, b: a.SerializeToString(deterministic=True) == \
        b.SerializeToString(deterministic=True)
    return (out_dims is not None and b_dims is not None and 0 < len(b_dims) <= len(out_dims)
            and b_dims[-1] == out_dims[-1] and all(d == 1 for d in b_dims[:-1])
            and same(add.outputs[0].type, lin.outputs[0].type)
            and const.outputs[0].type.tensorType.dataType
            == lin.outputs[0].type.tensorType.dataType)


def _fuse_top_block(top) -> int:
    if not any(op.type == "linear" for op in operations(top)):
        return 0  # nothing to fuse: one walk of the op types, without the index
    reads, producer = _index(top)
    fused, dropped = 0, []
    for site in list(walk(top)):
        add = site.op
        if add.type != "add" or len(add.outputs) != 1:
            continue
        for lin_param, b_param in (("x", "y"), ("y", "x")):
            lin_name, b_name = _single_name(add, lin_param), _single_name(add, b_param)
            ls, cs = producer.get(lin_name), producer.get(b_name)
            if ls is None or cs is None or ls.op.type != "linear" or ls.block is not site.block \
                    or "bias" in ls.op.inputs or reads[lin_name] != 1 \
                    or cs.op.type != "const" or not _fits(add, ls.op, cs.op):
                continue
            # No insertion: the fused linear takes the add's slot (the add was the linear's
            # only reader, so nothing in between reads it; its own inputs come earlier).
            # A bias const read only by the add is retyped in place (it precedes the add)
            # and the linear's old slot is dropped; a shared [1, ..., N] one is copied (as
            # [N], the same weight-file offset) into that slot.
            n = _dims(ls.op.outputs[0].type)[-1]
            if reads[b_name] == 1 or _dims(cs.op.outputs[0].type) == [n]:
                bias, slot = cs.op, None  # (a shared [N] bias is read as it is)
            else:
                bias, slot = type(cs.op)(), ls.op
                bias.CopyFrom(cs.op)
                _set_name(bias, _fresh(f"{lin_name}_bias", producer))
            _set_dims(bias.outputs[0].type, [n])
            _set_dims(bias.attributes["val"].type, [n])
            fused_op = type(ls.op)()
            fused_op.CopyFrom(ls.op)
            fused_op.inputs["bias"].arguments.add().name = bias.outputs[0].name
            _set_name(fused_op, add.outputs[0].name)
            add.CopyFrom(fused_op)
            if slot is None:
                dropped.append((ls.block, ls.index))
            else:
                slot.CopyFrom(bias)
                producer[bias.outputs[0].name] = ls
                reads[b_name] -= 1
                if reads[b_name] == 0:  # its last reader fused: the const is dead
                    dropped.append((cs.block, cs.index))
            fused += 1
            break
    for block, index in sorted(dropped, key=lambda d: -d[1]):
        del block.operations[index]
    return fused


def fuse_linear_bias(model) -> int:
    """Fuse constant bias adds into ``linear`` ops in every function of ``model`` (a
    Model_pb2.Model with an mlProgram) in place; returns how many were fused."""
    return sum(_fuse_top_block(top) for top in top_blocks(model))
