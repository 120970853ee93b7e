"""Helpers shared by the VJP rules (vjp/<family>.py); no rule is registered here."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ...ir import Value


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
