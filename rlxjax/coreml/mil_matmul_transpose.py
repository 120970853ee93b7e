"""Peephole on the lowered ML Program: a transpose of the last two dims next to a ``matmul``
becomes the matmul's ``transpose_x`` / ``transpose_y`` flag, so the transposed copy never
exists.

* ``matmul(x=transpose(a))`` -> ``matmul(x=a, transpose_x=not tx)`` (and the same for ``y``)
  when every reader of the transpose is a matmul operand: a tied embedding's output
  projection ``h @ wte.T`` (and its backward ``ct @ wte``) read the ``[V, D]`` table as it is
  instead of a ``[D, V]`` copy (GPT-2 small: 147 MiB live from the forward pass to the
  backward pass).
* ``transpose(matmul(x, y))`` -> ``matmul(y, x)`` with both flags flipped (``(xy)^T =
  y^T x^T``) when the transpose is the matmul's only reader: the tied embedding's gradient
  comes out in the table's layout.

The matmul reads the same values and forms every output element from the same products in
the same order of the contracted dim, so the results are bit for bit the same on the
reference interpreter (tests/memory/test_matmul_transpose.py compares the train-step
workloads' outputs with the pass and without it). MIL's ``transpose_x`` / ``transpose_y``
swap the last two dims of a rank >= 2 operand (coremltools iOS15 linear.py), exactly what a
transpose with ``perm = [0, ..., r-3, r-1, r-2]`` does.

Cost: O(n + the values read) per function block for the index and the walk (n ops), and one
pass over a block's ops to drop the folded ones (it was one search per folded transpose,
O(folded x n)).
"""
from __future__ import annotations

from .mil import bool_flag, top_blocks, walk
from .mil_peephole import fresh, index, single_name

_FLAG = {"x": "transpose_x", "y": "transpose_y"}


def _types(top):
    out = {}
    for site in walk(top):
        for o in site.op.outputs:
            out[o.name] = o.type
    return out


def _const_value(site):
    if site is None or site.op.type != "const" or "val" not in site.op.attributes:
        return None
    return site.op.attributes["val"].immediateValue.tensor


def _swaps_last_two(perm_site, rank) -> bool:
    t = _const_value(perm_site)
    if t is None or rank < 2:
        return False
    perm = [int(v) % rank for v in t.ints.values]
    return perm == list(range(rank - 2)) + [rank - 1, rank - 2]


class _Flags:
    """Named bool consts (``const`` ops at the top of the function block) to bind flags to."""

    def __init__(self, top, producer):
        self.top, self.producer, self.made = top, producer, {}

    def value(self, op, param) -> bool:
        return bool_flag(op, param, self._named)

    def _named(self, name):
        made = [f for f, n in self.made.items() if n == name]
        if made:
            return made[0]
        t = _const_value(self.producer.get(name))
        return t.bools.values[0] if t is not None and t.bools.values else None

    def name(self, flag: bool) -> str:
        if flag not in self.made:
            from coremltools.proto import MIL_pb2

            name = fresh(f"matmul_flag_{str(flag).lower()}", self.producer)
            op = MIL_pb2.Operation(type="const")
            op.attributes["name"].type.tensorType.dataType = MIL_pb2.STRING
            op.attributes["name"].immediateValue.tensor.strings.values.append(name)
            val = op.attributes["val"]
            val.type.tensorType.dataType = MIL_pb2.BOOL
            val.immediateValue.tensor.bools.values.append(flag)
            o = op.outputs.add()
            o.name = name
            o.type.tensorType.dataType = MIL_pb2.BOOL
            self.top.operations.insert(0, op)
            self.producer[name] = None  # taken
            self.made[flag] = name
        return self.made[flag]

    def set(self, op, param, flag: bool):
        op.inputs[param].Clear()
        op.inputs[param].arguments.add().name = self.name(flag)


def _rank(vtype) -> int:
    return vtype.tensorType.rank if vtype.WhichOneof("type") == "tensorType" else 0


def _fold_top_block(top, input_types) -> int:
    reads, producer = index(top)
    types = {**input_types, **_types(top)}
    flags = _Flags(top, producer)
    readers = {}
    for site in walk(top):
        for param, arg in site.op.inputs.items():
            for b in arg.arguments:
                if b.WhichOneof("binding") == "name":
                    readers.setdefault(b.name, []).append((site, param))
    dead = []
    folded = 0
    for site in list(walk(top)):
        op = site.op
        if op.type != "transpose" or len(op.outputs) != 1:
            continue
        out, src = op.outputs[0].name, single_name(op, "x")
        perm = single_name(op, "perm")
        if src is None or perm is None or not _swaps_last_two(producer.get(perm),
                                                             _rank(op.outputs[0].type)):
            continue
        users = readers.get(out, [])
        if users and reads[out] == len(users) and all(
                u.op.type == "matmul" and p in _FLAG for u, p in users):
            # case 1: every reader is a matmul operand
            for u, p in users:
                flip = not flags.value(u.op, _FLAG[p])
                u.op.inputs[p].Clear()
                u.op.inputs[p].arguments.add().name = src
                flags.set(u.op, _FLAG[p], flip)
            dead.append((site.block, out))
            folded += 1
            continue
        mm = producer.get(src)
        if mm is None or mm.op.type != "matmul" or mm.block is not site.block \
                or reads[src] != 1 or len(mm.op.outputs) != 1:
            continue
        x, y = single_name(mm.op, "x"), single_name(mm.op, "y")
        if x is None or y is None or x not in types or y not in types \
                or _rank(types[x]) < 2 or _rank(types[y]) < 2:
            continue
        # case 2: (x y)^T = y^T x^T, written in the transpose's slot (its name), the matmul
        # dropped
        tx, ty = flags.value(mm.op, "transpose_x"), flags.value(mm.op, "transpose_y")
        new = type(mm.op)()
        new.CopyFrom(mm.op)
        new.inputs["x"].Clear()
        new.inputs["x"].arguments.add().name = y
        new.inputs["y"].Clear()
        new.inputs["y"].arguments.add().name = x
        flags.set(new, "transpose_x", not ty)
        flags.set(new, "transpose_y", not tx)
        new.outputs[0].CopyFrom(op.outputs[0])
        if "name" in new.attributes:
            new.attributes["name"].immediateValue.tensor.strings.values[:] = [out]
        op.CopyFrom(new)
        dead.append((mm.block, src))
        folded += 1
    by_block = {}  # id(block) -> (block, the dead names in it): one pass over each block
    for block, name in dead:
        by_block.setdefault(id(block), (block, set()))[1].add(name)
    for block, names in by_block.values():
        ops = block.operations
        doomed = [i for i, candidate in enumerate(ops) if len(candidate.outputs) == 1
                  and candidate.outputs[0].name in names]  # (SSA: one op per name)
        for i in reversed(doomed):
            del ops[i]
    return folded


def fold_matmul_transposes(model) -> int:
    """Fold transposes into matmul flags in every function of ``model`` (a Model_pb2.Model
    with an mlProgram) in place; returns how many transposes went."""
    if model.WhichOneof("Type") != "mlProgram":
        return 0
    folded = 0
    for fn in model.mlProgram.functions.values():
        input_types = {i.name: i.type for i in fn.inputs}
        for top in fn.block_specializations.values():
            folded += _fold_top_block(top, input_types)
    return folded
