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
    # max's tie rule): keep the call as a custom_vjp op whose backward region JAX builds
    # from that rule, on demand (transforms/vjp/control.py).
    p = eqn.params
    closed = p.get("call_jaxpr") or p.get("fun_jaxpr")
    floats = [v.dtype.is_float for v in args]
    outs_float = [_is_float(v.aval.dtype) for v in eqn.outvars]
    if not any(floats) or not any(outs_float):
        return _inline(ctx, closed, args)
    primal = _region(ctx, "primal", closed, _types(args))
    bwd = _CustomBackward(ctx.source, eqn, _types(args), floats, outs_float)
    return ctx.add_multi("custom_vjp", args, primal=primal, bwd=bwd,
                         name=str(p.get("name", eqn.primitive.name)))


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


class _CustomBackward:
    """The backward region of a custom-derivative call, traced by JAX on first use:
    ``jax.vjp`` of the primitive re-bound as jax.core.eval_jaxpr does, which applies the
    user's jvp/fwd+bwd rule exactly as ``jax.grad`` would."""

    def __init__(self, source, eqn, in_types, floats, outs_float):
        self.source, self.eqn = source, eqn
        self.in_types, self.floats, self.outs_float = in_types, floats, outs_float
        self._graph = None

    def __call__(self) -> Graph:
        if self._graph is None:
            self._graph = self._build()
        return self._graph

    def _build(self) -> Graph:
        import jax

        from ...errors import UnsupportedPrimitiveError
        from ..interpreter import Lowering, aval_type

        eqn, floats, outs_float = self.eqn, self.floats, self.outs_float
        bind = jc.equation_binder(eqn)

        def bwd(xs, cts):
            def f(*fx):
                it = iter(fx)
                full = [next(it) if fl else x for fl, x in zip(floats, xs)]
                outs = bind(*full)
                return [o for o, fl in zip(outs, outs_float) if fl]

            _, vjp = jax.vjp(f, *[x for fl, x in zip(floats, xs) if fl])
            return vjp(list(cts))

        in_specs = [jax.ShapeDtypeStruct(a.aval.shape, a.aval.dtype) for a in eqn.invars]
        ct_specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
                    for v, fl in zip(eqn.outvars, outs_float) if fl]
        try:
            closed = jax.make_jaxpr(bwd)(in_specs, ct_specs)
        except Exception as e:  # the user's rule failed to trace: say whose rule
            raise UnsupportedPrimitiveError(
                eqn.primitive.name, self.source,
                f"its custom derivative rule could not be traced: {type(e).__name__}: {e}"
            ) from e
        g = Graph("custom_bwd")
        sub = Lowering(g)
        sub.source, sub.primitive = self.source, eqn.primitive.name
        ins = [g.add_input(f"in{i}", t) for i, t in enumerate(self.in_types)]
        cts = [g.add_input(f"ct{i}", aval_type(s)) for i, s in enumerate(ct_specs)]
        outs = sub.eval_jaxpr(closed.jaxpr, closed.consts, ins + cts)
        for i, v in enumerate(outs):
            g.add_output(f"ct_in{i}", v)
        return g


# -- control flow: region-carrying RLX ops ---------------------------------------------------
def _region(ctx, name, closed, in_types):
    """Translate a closed jaxpr into a region graph taking values of ``in_types``."""
    from ..interpreter import Lowering

    g = Graph(name)
    sub = Lowering(g)
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
