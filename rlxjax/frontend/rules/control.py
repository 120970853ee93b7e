"""Frontend rules for call-like primitives: their jaxprs are inlined into the graph."""
from __future__ import annotations

from jax.extend import core as jex_core

from ..registry import rule


def _inline(ctx, jaxpr, args):
    if isinstance(jaxpr, jex_core.ClosedJaxpr):
        return ctx.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, args)
    return ctx.eval_jaxpr(jaxpr, [], args)


@rule("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint", "remat2")
def _call(ctx, eqn, *args):
    p = eqn.params
    jaxpr = p.get("jaxpr") or p.get("call_jaxpr")
    if jaxpr is None:
        raise ctx.unsupported("call primitive without a jaxpr")
    return _inline(ctx, jaxpr, args)


@rule("custom_jvp_call")
def _custom_jvp_call(ctx, eqn, *args):
    # Forward semantics are the primal jaxpr; JAX's own differentiation rule is irrelevant
    # here because rlxjax differentiates the RLX graph itself.
    return _inline(ctx, eqn.params["call_jaxpr"], args)


@rule("custom_vjp_call", "custom_vjp_call_jaxpr")
def _custom_vjp_call(ctx, eqn, *args):
    p = eqn.params
    jaxpr = p.get("call_jaxpr") or p.get("fun_jaxpr")
    return _inline(ctx, jaxpr, args)
