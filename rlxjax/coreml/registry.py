"""Core ML lowerings: one function per RLX op, registered into the op's record
(``rlxjax.ir.ops.OpDef``, layer ``"lower"``).

A lowering is ``fn(ctx, node, *inputs) -> Var | tuple[Var, ...]``: ``inputs`` are the MIL
vars of the node's inputs; ``ctx`` (lower.LowerContext) gives the builder ``ctx.b``, the
target, ``ctx.out_type(node, i)`` — the node's output type under the chosen precision —
and ``ctx.analysis(fn)``: a fact about the whole graph being lowered (``ctx.graph``) that
the rule's own module computes, once per lowering (rules/norm.py ``stats_recomputed``,
rules/linear.py ``sole_read_consts``). The context knows no op.

A lowering claims the deployment targets it works on with ``since`` (the oldest; every
newer one is claimed too). tests/ir/test_op_records.py lowers a node of every op on every
target it claims.
"""
from __future__ import annotations

from typing import Tuple

from ..ir.ops import OPS, impls_of, register_impl
from .targets import TARGETS

#: op name -> lowering (a read-only view of the records)
LOWERINGS = impls_of("lower")


def lowering(*ops: str, since: str = "iOS15"):
    """Decorator: register ``fn`` as the lowering of each op in ``ops``, claimed to work on
    target ``since`` and newer."""
    if since not in TARGETS:
        raise ValueError(f"unknown target {since!r}")

    def register(fn):
        if getattr(fn, "since", since) != since:
            raise ValueError(f"lowering {fn.__name__} claims both {fn.since} and {since}")
        fn.since = since
        return register_impl("lower", *ops)(fn)

    return register


def claimed_targets(op: str) -> Tuple[str, ...]:
    """The targets ``op``'s lowering claims (none if it has no lowering)."""
    fn = OPS[op].impl("lower")
    if fn is None:
        return ()
    first = TARGETS[fn.since].order
    return tuple(name for name, t in TARGETS.items() if t.order >= first)


def lowers_natively(op: str, target) -> bool:
    """Whether ``op`` has a lowering here claimed on ``target`` (a ``Target``): the legalize
    stage (rlxjax/transforms/legalize/) decomposes the ops that have none first."""
    fn = LOWERINGS.get(op)
    return fn is not None and target.order >= TARGETS[fn.since].order
