"""VJP rules: dot_general (the cotangent contracted with the other operand)."""
from __future__ import annotations

import numpy as np

from .registry import vjp_rule


def _operand_ct(ctx, ct, other, own_rank, own_batch, own_contract, other_batch,
                other_contract, other_free, ct_free_other):
    """Cotangent of one dot_general operand.

    ct's dims are [batch, lhs free, rhs free]. Contract ct's dims that belong to the
    other operand's free dims with those dims. dot_general(ct, other) lays the result out
    as [batch, own free, own contract dims (in the other's contract order)] and
    dot_general(other, ct) as [batch, own contract dims, own free]; take the order that
    needs no transpose back to the operand's own dim order when there is one (the usual
    weight gradient x^T·ct), else transpose."""
    nb = len(own_batch)
    own_free = [d for d in range(own_rank) if d not in own_batch and d not in own_contract]
    pair = dict(zip(other_contract, own_contract))
    contract_dims = [pair[c] for c in sorted(other_contract)]
    identity = list(range(own_rank))
    if list(own_batch) + contract_dims + own_free == identity and \
            list(own_batch) + own_free + contract_dims != identity:
        return ctx.add("dot_general", other, ct,
                       contract=(tuple(other_free), tuple(ct_free_other)),
                       batch=(tuple(other_batch), tuple(range(nb))))
    r = ctx.add("dot_general", ct, other,
                contract=(tuple(ct_free_other), tuple(other_free)),
                batch=(tuple(range(nb)), tuple(other_batch)))
    layout = list(own_batch) + own_free + contract_dims
    perm = tuple(int(i) for i in np.argsort(layout))
    return r if perm == tuple(identity) else ctx.add("transpose", r, perm=perm)


@vjp_rule("dot_general")
def _dot_general(ctx, node, cts, needs):
    (ct,), (a, b) = cts, node.inputs
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lf = [d for d in range(a.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(b.type.rank) if d not in rc and d not in rb]
    nb = len(lb)
    ct_lf = list(range(nb, nb + len(lf)))
    ct_rf = list(range(nb + len(lf), nb + len(lf) + len(rf)))
    out = [None, None]
    if needs[0]:
        out[0] = _operand_ct(ctx, ct, b, a.type.rank, lb, lc, rb, rc, rf, ct_rf)
    if needs[1]:
        out[1] = _operand_ct(ctx, ct, a, b.type.rank, rb, rc, lb, lc, lf, ct_lf)
    return out
