"""What the MIL peepholes (mil_linear_bias.py, mil_scaled_tanh.py) share: who reads and
who produces each value of a function, an op's single input name, static dims, renaming.
``index`` is one walk, O(ops + the values they read)."""
from __future__ import annotations

from collections import Counter

from .mil import blocks, walk


def names(op):
    """The value names ``op`` reads (name bindings of all its inputs)."""
    for arg in op.inputs.values():
        for b in arg.arguments:
            if b.WhichOneof("binding") == "name":
                yield b.name


def index(top):
    """(reads: name -> how many ops and block outputs read it, producer: name -> OpSite)
    over the function block ``top`` and every block nested in it."""
    reads, producer = Counter(), {}
    for site in walk(top):
        reads.update(names(site.op))
        for o in site.op.outputs:
            producer[o.name] = site
    for block in blocks(top):
        reads.update(block.outputs)
    return reads, producer


def single_name(op, param):
    """The one value name bound to ``op``'s input ``param``, or None."""
    arg = op.inputs.get(param)
    if arg is None or len(arg.arguments) != 1 or arg.arguments[0].WhichOneof("binding") != "name":
        return None
    return arg.arguments[0].name


def dims(vtype):
    """The static dims of a tensor value type, or None."""
    t = vtype.tensorType
    if any(d.WhichOneof("dimension") != "constant" for d in t.dimensions):
        return None
    return [d.constant.size for d in t.dimensions]


def set_name(op, name):
    """Rename ``op``'s (single) output, and its ``name`` attribute."""
    op.outputs[0].name = name
    if "name" in op.attributes:
        op.attributes["name"].immediateValue.tensor.strings.values[:] = [name]


def fresh(name, taken) -> str:
    """``name``, or ``name_k`` for the first k that is not in ``taken``."""
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    return out
