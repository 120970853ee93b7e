"""Helpers shared by the VJP rules (vjp/<family>.py); no rule is registered here."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ...ir import Value
from ...ir.ops import OPS


def backward_op(node) -> str:
    """The backward op ``node``'s record declares (``OpDef.backward``): a rule emits the name
    found there, so that grepping a backward op finds the record of the op it belongs to."""
    (op,) = OPS[node.op].backward
    return op


def emit(ctx, op, inputs, roles: Sequence[Optional[str]], needs, **params):
    """Add ``op`` producing the gradient named ``roles[i]`` for each forward input i that
    ``needs`` (roles are listed in the op's canonical output order); -> one entry per input."""
    res: List[Optional[Value]] = [None] * len(roles)
    wanted = [(i, r) for i, r in enumerate(roles) if r is not None and needs[i]]
    if not wanted:
        return res
    outs = ctx.add_multi(op, inputs, outputs=tuple(r for _, r in wanted), **params)
    for (i, _), v in zip(wanted, outs):
        res[i] = v
    return res
