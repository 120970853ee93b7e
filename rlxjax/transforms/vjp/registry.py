"""VJP rules: one per RLX op, grouped by op family (vjp/<family>.py), registered into the
op's record (``rlxjax.ir.ops.OpDef``, layer ``"vjp"``).

A rule is ``rule(ctx, node, cts, needs) -> list`` with
  - ``cts``: one cotangent per node output: a ``Value`` or ``None`` (a symbolic zero);
  - ``needs``: one bool per node input: whether that input's cotangent is wanted;
  - result: one entry per node input: a ``Value`` of the input's type, or ``None`` (zero,
    or not wanted).
``ctx`` is a ``grad.GradContext``: ``ctx.add(op, *inputs, **params)``,
``ctx.add_multi(op, inputs, **params)``, ``ctx.constant(array)``, ``ctx.scalar(v, like)``,
``ctx.zeros(type)``, ``ctx.sum_to(ct, shape)`` (numpy un-broadcast) and
``ctx.instantiate(ct, type)`` (None -> zeros).

An op whose record says ``differentiable=False`` passes no cotangent and has no rule; an
op that is differentiable but whose derivative rlxjax refuses registers a rule made by
``refuse_vjp`` (it raises, naming the user's line, and the coverage table says why).
"""
from __future__ import annotations

from ...errors import UnsupportedPrimitiveError
from ...ir.ops import OPS, impls_of, register_impl

#: op name -> VJP rule (a read-only view of the records)
VJPS = impls_of("vjp")


class _NonDifferentiable:
    """The ops whose record says ``differentiable=False`` (a live view of the records)."""

    def __contains__(self, op) -> bool:
        d = OPS.get(op)
        return d is not None and not d.differentiable

    def __iter__(self):
        return (n for n, d in OPS.items() if not d.differentiable)

    def __len__(self):
        return sum(1 for _ in self)

    def __repr__(self):
        return "NON_DIFFERENTIABLE{" + ", ".join(sorted(self)) + "}"


#: ops whose outputs never carry a cotangent (integer/bool results, or piecewise constant)
NON_DIFFERENTIABLE = _NonDifferentiable()


def vjp_rule(*ops: str):
    """Decorator: register ``fn`` as the VJP rule of each op in ``ops``."""
    for op in ops:
        d = OPS.get(op)
        if d is not None and not d.differentiable:
            raise ValueError(f"VJP rule for {op}, whose record says it is not differentiable")
    return register_impl("vjp", *ops)


def refuse_vjp(reason: str, *ops: str):
    """Register, for each op in ``ops``, a VJP rule that refuses with ``reason``."""

    def refuse(ctx, node, cts, needs):
        raise UnsupportedPrimitiveError(node.op, node.source, reason)

    refuse.refusal = reason
    return vjp_rule(*ops)(refuse)


def refusal(op: str):
    """The reason ``op``'s VJP refuses to differentiate, or None."""
    rule = OPS[op].impl("vjp")
    return getattr(rule, "refusal", None)
