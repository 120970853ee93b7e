"""VJP rules for control flow (ir/control.py).

- ``cond``: the backward pass is another ``cond`` on the same index whose branches are the
  VJPs of the forward branches (each recomputes its branch's forward values, then runs its
  backward pass), so only the taken branch's derivative is evaluated — unlike a ``select``
  of both, which lets an untaken branch's inf/NaN derivative leak into the gradient.
- ``while``: reverse-mode differentiation is an error, as in JAX.
- ``scan``: a reverse scan over the saved per-step carries (see ``_scan``); programs stay
  loops, so they do not grow with the scan's length.
- ``remat`` (``jax.checkpoint``): the backward recomputes what the policy did not save.
"""
from __future__ import annotations

from ...errors import RlxError
from ...ir import Graph
from ..regions import inline
from ..rewrite import dce, substitute
from .registry import refuse_vjp, vjp_rule


@vjp_rule("cond")
def _cond(ctx, node, cts, needs):
    operands = node.inputs[1:]
    want = [need and v.dtype.is_float for need, v in zip(needs[1:], operands)]
    live = [(i, c) for i, c in enumerate(cts) if c is not None]
    if not any(want) or not live:
        return [None] * len(node.inputs)
    branches = []
    for k, g in enumerate(node.regions["branches"]):
        bg = Graph(f"{g.name}_vjp")
        ins = [bg.add_input(f"in{i}", v.type) for i, v in enumerate(operands)]
        ct_ins = [bg.add_input(f"ct{i}", c.type) for i, c in live]
        outs = inline(bg, g, ins)
        seeds = [(outs[i], ct) for (i, _), ct in zip(live, ct_ins)]
        wrt = [v for v, w in zip(ins, want) if w]
        for j, grad in enumerate(ctx.backward_seeded(bg, seeds, wrt)):
            bg.add_output(f"ct_in{j}", grad)
        dce(bg)
        branches.append(bg)
    grads = iter(ctx.add_multi("cond", [node.inputs[0], *operands, *[c for _, c in live]],
                               branches=tuple(branches)))
    return [None] + [next(grads) if w else None for w in want]


refuse_vjp("reverse-mode differentiation of a while_loop is not supported (JAX refuses it "
           "too): use lax.scan, or lax.fori_loop with bounds known at trace time (JAX turns "
           "that into a scan), for a loop you need gradients through", "while")


@vjp_rule("scan")
def _scan(ctx, node, cts, needs):
    """The backward pass of a scan is a scan running the other way: step t recomputes the
    forward step from its saved input carry (regions.save_scan_carries) and applies that
    step's VJP; the cotangents of the consts are summed in its carry."""
    p = node.params
    if not p.get("saved_carries"):
        raise RlxError("internal: a scan reached the grad transform without saved carries")
    body, nc, nk = node.regions["body"], p["num_consts"], p["num_carry"]
    ins = list(node.inputs)
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    ny = len(node.outputs) - 2 * nk
    saved = list(node.outputs[nk + ny:])
    fl = [v.dtype.is_float for v in ins]
    fc, fk, fx = fl[:nc], fl[nc:nc + nk], fl[nc + nk:]
    b_outs = [v for _, v in body.outputs]
    fy = [v.dtype.is_float for v in b_outs[nk:nk + ny]]
    if not any(n and f for n, f in zip(needs, fl)):
        return [None] * len(ins)

    # One step's VJP: (consts, carry_t, x_t, ct of carry_{t+1}, ct of y_t)
    #   -> (ct of float consts, ct of float carry_t, ct of float x_t).
    step = Graph(f"{body.name}_vjp")
    s_in = [step.add_input(f"in{i}", v.type) for i, (_, v) in enumerate(body.inputs)]
    s_ck = [step.add_input(f"ct_carry{i}", t.type) for i, t in enumerate(b_outs[:nk]) if fk[i]]
    s_cy = [step.add_input(f"ct_y{i}", t.type)
            for i, t in enumerate(b_outs[nk:nk + ny]) if fy[i]]
    outs = inline(step, body, s_in)
    seeds = list(zip([v for v, f in zip(outs[:nk], fk) if f], s_ck))
    seeds += list(zip([v for v, f in zip(outs[nk:nk + ny], fy) if f], s_cy))
    wrt = [v for v, f in zip(s_in, fc + fk + fx) if f]
    for i, g in enumerate(ctx.backward_seeded(step, seeds, wrt)):
        step.add_output(f"ct{i}", g)
    dce(step)
    n_fc, n_fk = sum(fc), sum(fk)

    # The reverse scan: consts; carry (ct of float carry, sum of ct of float consts);
    # xs (saved carries, xs, ct of float ys).
    rb = Graph(f"{body.name}_reverse")
    r_consts = [rb.add_input(f"const{i}", v.type) for i, v in enumerate(consts)]
    r_ck = [rb.add_input(f"ct_carry{i}", v.type) for i, v in enumerate(init) if fk[i]]
    r_acc = [rb.add_input(f"ct_const{i}", v.type) for i, v in enumerate(consts) if fc[i]]
    r_carry = [rb.add_input(f"carry{i}", v.type) for i, v in enumerate(init)]
    r_x = [rb.add_input(f"x{i}", v.type.with_shape(tuple(v.shape[1:])))
           for i, v in enumerate(xs)]
    r_cy = [rb.add_input(f"ct_y{i}", t.type) for i, t in enumerate(b_outs[nk:nk + ny]) if fy[i]]
    g = inline(rb, step, r_consts + r_carry + r_x + r_ck + r_cy)
    g_c, g_k, g_x = g[:n_fc], g[n_fc:n_fc + n_fk], g[n_fc + n_fk:]
    new_acc = [rb.add_node("add", (a, b), {}, ctx.source).output for a, b in zip(r_acc, g_c)]
    for i, v in enumerate(g_k + new_acc + g_x):
        rb.add_output(f"out{i}", v)

    ct_k = [ctx.instantiate(c, v.type) for c, v, f in zip(cts[:nk], node.outputs[:nk], fk) if f]
    ct_y = [ctx.instantiate(c, v.type)
            for c, v, f in zip(cts[nk:nk + ny], node.outputs[nk:nk + ny], fy) if f]
    acc0 = [ctx.zeros(v.type) for v, f in zip(consts, fc) if f]
    res = ctx.add_multi("scan", consts + ct_k + acc0 + saved + xs + ct_y, body=rb,
                        length=p["length"], reverse=not p["reverse"], num_consts=nc,
                        num_carry=n_fk + n_fc)
    r_k, r_c, r_x = res[:n_fk], res[n_fk:n_fk + n_fc], res[n_fk + n_fc:]
    it_c, it_k, it_x = iter(r_c), iter(r_k), iter(r_x)
    return ([next(it_c) if f else None for f in fc] + [next(it_k) if f else None for f in fk]
            + [next(it_x) if f else None for f in fx])


@vjp_rule("custom_vjp")
def _custom_vjp(ctx, node, cts, needs):
    # The rule is a JAX object: the trace that made the node keeps it (frontend
    # custom_rules.py), and builds its backward region only now, when it is needed.
    if ctx.custom_backward is None:
        raise RlxError(f"custom_vjp {node.params['name']}: the grad transform was given no "
                       "custom derivative rules (pass the trace's custom_rules.backward)")
    bwd = ctx.custom_backward(node.params["rule"])
    ct_vals = [ctx.instantiate(c, v.type) for c, v in zip(cts, node.outputs)
               if v.dtype.is_float]
    grads = iter(inline(ctx.graph, bwd, list(node.inputs) + ct_vals, ctx.source))
    return [next(grads) if v.dtype.is_float else None for v in node.inputs]


@vjp_rule("remat")
def _remat(ctx, node, cts, needs):
    """``jax.checkpoint``: the backward pass recomputes the body from its inputs - read
    through a ``remat_barrier``, so that no CSE replaces the recomputation by the forward
    pass's values - and differentiates that; the values the policy saved (the body's
    outputs after ``num_out``) then replace their recomputed twins, which are dropped."""
    n = node.params["num_out"]
    body = node.regions["body"]
    want = [need and v.dtype.is_float for need, v in zip(needs, node.inputs)]
    live = [(i, c) for i, c in enumerate(cts[:n]) if c is not None]
    if not any(want) or not live:
        return [None] * len(node.inputs)
    saved = list(node.outputs[n:])
    bg = Graph(f"{body.name}_vjp")
    ins = [bg.add_input(f"in{i}", v.type) for i, v in enumerate(node.inputs)]
    res = [bg.add_input(f"saved{j}", v.type) for j, v in enumerate(saved)]
    ct_ins = [bg.add_input(f"ct{i}", c.type) for i, c in live]
    # every input but constants goes through the barrier: also the function's inputs (the
    # parameters), else what the body computes from them alone (a reshaped kernel) would be
    # merged with the forward pass's and held until the backward pass
    fenced = [i for i, v in enumerate(node.inputs)
              if v.node is None or v.node.op != "constant"]
    reads = list(ins)
    if fenced:
        fence = bg.add_node("remat_barrier", [ins[i] for i in fenced], {}, ctx.source)
        for i, v in zip(fenced, fence.outputs):
            reads[i] = v
    outs = inline(bg, body, reads)
    seeds = [(outs[i], ct) for (i, _), ct in zip(live, ct_ins)]
    wrt = [v for v, w in zip(reads, want) if w]
    grads = ctx.backward_seeded(bg, seeds, wrt)
    for j, g in enumerate(grads):
        bg.add_output(f"ct_in{j}", g)
    substitute(bg, {outs[n + j].id: r for j, r in enumerate(res)})
    dce(bg)
    results = iter(inline(ctx.graph, bg, list(node.inputs) + saved + [c for _, c in live],
                          ctx.source))
    return [next(results) if w else None for w in want]
