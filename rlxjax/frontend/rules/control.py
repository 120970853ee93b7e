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


@rule("jit", "pjit", "closed_call", "core_call")
def _call(ctx, eqn, *args):
    p = eqn.params
    jaxpr = p.get("jaxpr") or p.get("call_jaxpr")
    if jaxpr is None:
        raise ctx.unsupported("call primitive without a jaxpr")
    # Inside a library function (jnp.linalg.eigh) the equations' user frames come from the
    # trace that cached its jaxpr, perhaps at another call site: report this call's line.
    saved, ctx.in_library = ctx.in_library, ctx.in_library or jc.is_library_function(jaxpr)
    try:
        return _inline(ctx, jaxpr, args)
    finally:
        ctx.in_library = saved


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
# Zero-size operands, carries and results (Core ML has no zero-size tensors; their values are
# known from their shapes, frontend/zerosize.py) never enter a region op: a region reads an
# empty constant in place of a zero-size input, drops its zero-size outputs, and the op's
# zero-size results are empty constants.
def _region(ctx, name, closed, in_types, drop_out=None):
    """Translate a closed jaxpr into a region graph taking values of ``in_types``. With
    ``drop_out`` (control flow), a zero-size input is an empty constant, not an input, and
    outputs ``drop_out`` are left out."""
    g = Graph(name)
    sub = type(ctx)(g, ctx.custom_rules)  # a Lowering like ctx, sharing its rule table
    sub.source, sub.primitive = ctx.source, ctx.primitive
    ins = [_empty_const(sub, t) if drop_out is not None and _is_empty(t)
           else g.add_input(f"in{i}", t) for i, t in enumerate(in_types)]
    drop_out = drop_out or ()
    outs = _inline(sub, closed, ins)
    for i, v in enumerate(outs):
        if i not in drop_out:
            g.add_output(f"out{i}", v)
    if sub.made_empty:
        from ...transforms.rewrite import dce

        dce(g)
    return g


def _types(values):
    return [v.type for v in values]


def _is_empty(t) -> bool:
    return t.is_static and t.size == 0


def _empty_const(ctx, t):
    ctx.made_empty = True
    return ctx.constant(np.zeros(tuple(t.shape), t.dtype.np))


def _kept(values):
    return tuple(v for v in values if not _is_empty(v.type))


def _results(ctx, eqn, outs):
    """The equation's results: empty constants for its zero-size outvars, ``outs`` (the
    op's outputs) in order for the others."""
    it, res = iter(outs), []
    for v in eqn.outvars:
        if _empty_aval(v.aval):
            ctx.made_empty = True
            res.append(ctx.constant(np.zeros(tuple(v.aval.shape), v.aval.dtype)))
        else:
            res.append(next(it))
    return res


def _empty_aval(aval) -> bool:
    return any(int(d) == 0 for d in aval.shape)


@rule("cond")
def _cond(ctx, eqn, index, *operands):
    if index.dtype != DType.i32:  # JAX passes an int32 index; be explicit about anything else
        raise ctx.unsupported(f"cond index of type {index.type}")
    if len(eqn.params["branches"]) == 1:
        return _inline(ctx, eqn.params["branches"][0], operands)
    drop = {i for i, v in enumerate(eqn.outvars) if _empty_aval(v.aval)}
    branches = tuple(_region(ctx, f"branch{k}", br, _types(operands), drop)
                     for k, br in enumerate(eqn.params["branches"]))
    if len(drop) == len(eqn.outvars):
        return _results(ctx, eqn, ())
    outs = ctx.add_multi("cond", (index,) + _kept(operands), branches=branches)
    return _results(ctx, eqn, outs)


@rule("while")
def _while(ctx, eqn, *args):
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, init = args[:nc], args[nc:nc + nb], args[nc + nb:]
    drop = {i for i, v in enumerate(init) if _is_empty(v.type)}
    cond = _region(ctx, "cond", p["cond_jaxpr"], _types(cc) + _types(init), set())
    body = _region(ctx, "body", p["body_jaxpr"], _types(bc) + _types(init), drop)
    if len(drop) == len(init):  # nothing carried: its results are known
        return _results(ctx, eqn, ())
    outs = ctx.add_multi("while", _kept(cc) + _kept(bc) + _kept(init), cond=cond, body=body,
                         n_cond_consts=len(_kept(cc)), n_body_consts=len(_kept(bc)))
    return _results(ctx, eqn, outs)


@rule("scan")
def _scan(ctx, eqn, *args):
    p = eqn.params
    length, nc, nk = int(p["length"]), p["num_consts"], p["num_carry"]
    consts, init, xs = args[:nc], args[nc:nc + nk], args[nc + nk:]
    if length == 0:  # no step: the carries are the initial ones, the stacked ys are empty
        ctx.made_empty = True
        return list(init) + [ctx.constant(np.zeros(tuple(v.aval.shape), v.aval.dtype))
                             for v in eqn.outvars[nk:]]
    x_types = [t.with_shape(tuple(t.shape[1:])) for t in _types(xs)]
    drop = {i for i, v in enumerate(eqn.outvars) if _empty_aval(v.aval)}
    body = _region(ctx, "body", p["jaxpr"], _types(consts) + _types(init) + x_types, drop)
    if len(drop) == len(eqn.outvars):
        return _results(ctx, eqn, ())
    outs = ctx.add_multi("scan", _kept(consts) + _kept(init) + _kept(xs), body=body,
                         length=length, reverse=bool(p["reverse"]),
                         num_consts=len(_kept(consts)), num_carry=len(_kept(init)))
    return _results(ctx, eqn, outs)


@rule("empty2", "empty")
def _empty(ctx, eqn):
    # JAX's placeholder for residuals of an untaken cond branch or a scan's first step:
    # its contents are unspecified and never read; XLA materialises zeros, and so do we.
    aval = eqn.outvars[0].aval
    return ctx.constant(np.zeros(aval.shape, aval.dtype))


@rule("platform_index")
def _platform_index(ctx, eqn):
    # lax.platform_dependent (jnp.diagonal, hence det / slogdet / trace, emits one): the
    # index of the branch for the platform compiled for. rlxjax follows XLA:CPU's
    # semantics, so it takes the 'cpu' branch, else the default (None) one.
    platforms = eqn.params["platforms"]
    pick = next((i for i, ps in enumerate(platforms) if ps is not None and "cpu" in ps),
                next((i for i, ps in enumerate(platforms) if ps is None), None))
    if pick is None:
        raise ctx.unsupported(f"no branch for the CPU or a default among {platforms}")
    return ctx.constant(np.int32(pick))
