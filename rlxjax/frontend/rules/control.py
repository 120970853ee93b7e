"""Frontend rules for call-like primitives (their jaxprs are inlined into the graph) and
for control flow (cond / while / scan become region-carrying RLX ops, ir/control.py)."""
from __future__ import annotations

import numpy as np
from ... import _jax_compat as jc

from ...ir import DType, Graph
from ..registry import rule


def _inline(ctx, jaxpr, args):
    if isinstance(jaxpr, jc.ClosedJaxpr):
        return ctx.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, args)
    return ctx.eval_jaxpr(jaxpr, [], args)


@rule("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint", "remat2")
def _call(ctx, eqn, *args):
    p = eqn.params
    jaxpr = p.get("jaxpr") or p.get("call_jaxpr")
    if jaxpr is None:
        raise ctx.unsupported("call primitive without a jaxpr")
    return _inline(ctx, jaxpr, args)


@rule("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr")
def _custom_call(ctx, eqn, *args):
    # The user's derivative rule matters (jax.nn.relu has derivative 0 at 0, not the 1/2 of
    # max's tie rule): keep the call as a custom_vjp op whose rule the trace keeps in its
    # side table (custom_rules.py); JAX builds the backward region from it on demand.
    p = eqn.params
    closed = p.get("call_jaxpr") or p.get("fun_jaxpr")
    floats = [v.dtype.is_float for v in args]
    outs_float = [_is_float(v.aval.dtype) for v in eqn.outvars]
    if ctx.custom_rules is None or not any(floats) or not any(outs_float):
        return _inline(ctx, closed, args)
    primal = _region(ctx, "primal", closed, _types(args))
    rule_id = ctx.custom_rules.add(ctx.source, eqn, _types(args), floats, outs_float)
    return ctx.add_multi("custom_vjp", args, primal=primal, rule=rule_id,
                         name=str(p.get("name", eqn.primitive.name)))


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


# -- control flow: region-carrying RLX ops ---------------------------------------------------
def _region(ctx, name, closed, in_types):
    """Translate a closed jaxpr into a region graph taking values of ``in_types``."""
    g = Graph(name)
    sub = type(ctx)(g, ctx.custom_rules)  # a Lowering like ctx, sharing its rule table
    sub.source, sub.primitive = ctx.source, ctx.primitive
    ins = [g.add_input(f"in{i}", t) for i, t in enumerate(in_types)]
    outs = _inline(sub, closed, ins)
    for i, v in enumerate(outs):
        g.add_output(f"out{i}", v)
    return g


def _types(values):
    return [v.type for v in values]


@rule("cond")
def _cond(ctx, eqn, index, *operands):
    if index.dtype != DType.i32:  # JAX passes an int32 index; be explicit about anything else
        raise ctx.unsupported(f"cond index of type {index.type}")
    branches = tuple(_region(ctx, f"branch{k}", br, _types(operands))
                     for k, br in enumerate(eqn.params["branches"]))
    if len(branches) == 1:
        return _inline(ctx, eqn.params["branches"][0], operands)
    return ctx.add_multi("cond", (index,) + tuple(operands), branches=branches)


@rule("while")
def _while(ctx, eqn, *args):
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, init = args[:nc], args[nc:nc + nb], args[nc + nb:]
    cond = _region(ctx, "cond", p["cond_jaxpr"], _types(cc) + _types(init))
    body = _region(ctx, "body", p["body_jaxpr"], _types(bc) + _types(init))
    return ctx.add_multi("while", args, cond=cond, body=body, n_cond_consts=nc,
                         n_body_consts=nb)


@rule("scan")
def _scan(ctx, eqn, *args):
    p = eqn.params
    length, nc, nk = int(p["length"]), p["num_consts"], p["num_carry"]
    consts, init, xs = args[:nc], args[nc:nc + nk], args[nc + nk:]
    if length == 0:
        raise ctx.unsupported("scan of length 0 (Core ML has no zero-size tensors)")
    x_types = [t.with_shape(tuple(t.shape[1:])) for t in _types(xs)]
    body = _region(ctx, "body", p["jaxpr"], _types(consts) + _types(init) + x_types)
    return ctx.add_multi("scan", args, body=body, length=length, reverse=bool(p["reverse"]),
                         num_consts=nc, num_carry=nk)


@rule("empty2", "empty")
def _empty(ctx, eqn):
    # JAX's placeholder for residuals of an untaken cond branch or a scan's first step:
    # its contents are unspecified and never read; XLA materialises zeros, and so do we.
    aval = eqn.outvars[0].aval
    return ctx.constant(np.zeros(aval.shape, aval.dtype))
