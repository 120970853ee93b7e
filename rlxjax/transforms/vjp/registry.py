"""Registry of VJP rules: one per RLX op, grouped by op family (vjp/<family>.py).

A rule is ``rule(ctx, node, cts, needs) -> list`` with
  - ``cts``: one cotangent per node output: a ``Value`` or ``None`` (a symbolic zero);
  - ``needs``: one bool per node input: whether that input's cotangent is wanted;
  - result: one entry per node input: a ``Value`` of the input's type, or ``None`` (zero,
    or not wanted).
``ctx`` is a ``grad.GradContext``: ``ctx.add(op, *inputs, **params)``,
``ctx.add_multi(op, inputs, **params)``, ``ctx.constant(array)``, ``ctx.scalar(v, like)``,
``ctx.zeros(type)``, ``ctx.sum_to(ct, shape)`` (numpy un-broadcast) and
``ctx.instantiate(ct, type)`` (None -> zeros).
"""
from __future__ import annotations

from typing import Callable, Dict

VJPS: Dict[str, Callable] = {}

# Ops whose outputs never carry a cotangent (integer/bool results, or piecewise constant).
NON_DIFFERENTIABLE = {
    "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "not", "argmax", "argmin",
    "sign", "floor", "ceil", "round", "stop_gradient",
}


def vjp_rule(*ops: str):
    def register(fn):
        for op in ops:
            if op in VJPS:
                raise ValueError(f"VJP rule for {op} defined twice")
            VJPS[op] = fn
        return fn

    return register
