"""Registry of frontend rules: one function per JAX primitive name.

A rule is ``rule(ctx, eqn, *inputs) -> Value | sequence of Values`` where ``inputs`` are the
RLX values bound to the equation's invars and ``ctx`` (a ``Lowering`` from interpreter.py)
adds nodes to the graph under construction, recording the user's source line.
"""
from __future__ import annotations

from typing import Callable, Dict

RULES: Dict[str, Callable] = {}


def rule(*names: str):
    def register(fn):
        for n in names:
            if n in RULES:
                raise ValueError(f"frontend rule for {n} defined twice")
            RULES[n] = fn
        return fn

    return register
