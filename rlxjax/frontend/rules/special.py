"""Frontend rules: the elementwise math of ir/special.py, one RLX op per JAX primitive."""
from __future__ import annotations

from ...ir.special import SPECIAL_BINARY, SPECIAL_UNARY
from ..registry import rule


def _same(op):
    def fn(ctx, eqn, *xs):
        return ctx.add(op, *xs)

    return fn


for _p in SPECIAL_UNARY + SPECIAL_BINARY:
    rule(_p)(_same(_p))
rule("regularized_incomplete_beta")(_same("betainc"))
