"""Registry of Core ML lowerings: one function per RLX op.

A lowering is ``fn(ctx, node, *inputs) -> Var | tuple[Var, ...]``: ``inputs`` are the MIL
vars of the node's inputs; ``ctx`` (lower.LowerContext) gives the builder ``ctx.b``, the
target, and ``ctx.out_type(node, i)`` — the node's output type under the chosen precision.
"""
from __future__ import annotations

from typing import Callable, Dict

LOWERINGS: Dict[str, Callable] = {}


def lowering(*ops: str):
    def register(fn):
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"lowering for {op} defined twice")
            LOWERINGS[op] = fn
        return fn

    return register
