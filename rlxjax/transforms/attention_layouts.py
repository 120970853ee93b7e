"""Attention in other layouts than ``[batch..., L, E]`` (used by recognize_attention).

jax.nn.dot_product_attention (implementation='xla', so also nnx.MultiHeadAttention) computes

    scores = dot_general(q[B, L, N, 1, E], k[B, S, N, E]) · c     -> [B, N, L, 1, S]
    P      = softmax(transpose(scores), last axis)                 -> [1, B, N, L, S]
    out    = dot_general(v, P)                                     -> [B, N, EV, 1, L]

(with is_causal, ``where(mask, transpose(scores), fill)``: attention_masks.py) so the
probabilities carry size-1 free dims (the query-group dim of grouped attention) and
are a transposed copy of the scores. ``match_general`` labels every dim of the second
dot_general's operand P by where it comes from in the first dot_general (a batch dim, the
key dim S, a free dim of q) and accepts the pattern when P contracts S with v, pairs all of
the scores' batch dims with v's, and its free dims are q's free dims, all but one of them
(the op's L) of size 1. ``build_general`` moves q, k and v into the op's layout (transpose,
reshape away the size-1 dims) and the result back into the second dot_general's (reshape,
transpose): only data movement around the same attention.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Value
from .attention_masks import additive_mask, one_copy


def _free(rank, batch, contract):
    return [d for d in range(rank) if d not in batch and d not in contract]


def match_general(d2, pn, p_val, v, pb, pc, vb, vc, p_lhs, unscaled) -> Optional[dict]:
    """The pattern of the module docstring, ``pn`` the softmax node of ``p_val``."""
    r = p_val.type.rank
    if len(pc) != 1 or pn.params["axis"] != pc[0] or len(vc) != 1 or len(pb) != len(vb):
        return None
    v_free = _free(v.type.rank, vb, vc)
    if len(v_free) != 1:
        return None
    x = pn.inputs[0]
    mask = None
    if x.node is not None and x.node.op == "select":  # is_causal: where(mask, transpose(s))
        where = additive_mask(x, x.shape)
        if where is None:
            return None
        x, mask = where
        mask = np.broadcast_to(mask, tuple(x.shape))
    if x.node is not None and x.node.op == "transpose":
        s_in, tperm = x.node.inputs[0], tuple(x.node.params["perm"])
    else:
        s_in, tperm = x, tuple(range(r))
    c, d1 = unscaled(s_in)
    if d1.node is None or d1.node.op != "dot_general" or d1.type.rank != r:
        return None
    (qb, kb), (qc, kc) = d1.node.params["batch"], d1.node.params["contract"]
    q, k = d1.node.inputs
    if len(qc) != 1:
        return None
    qf, kf = _free(q.type.rank, qb, qc), _free(k.type.rank, kb, kc)
    if len(kf) != 1 or not qf:
        return None
    nb = len(qb)
    labels = [("b", i) for i in range(nb)] + [("q", d) for d in qf] + [("S",)]
    p_lab = [labels[tperm[t]] for t in range(r)]
    if p_lab[pc[0]] != ("S",) or sorted(p_lab[d] for d in pb) != labels[:nb]:
        return None
    p_free = _free(r, pb, pc)
    if any(p_lab[d][0] != "q" for d in p_free):
        return None
    big = [d for d in qf if q.shape[d] != 1]
    if len(big) > 1:
        return None
    q_l = big[0] if big else qf[-1]
    units = [d for d in qf if d != q_l]
    cq, q0 = unscaled(q)
    ck, k0 = unscaled(k)
    if q0.type.rank != q.type.rank or k0.type.rank != k.type.rank:
        return None
    v_batch = [None] * nb
    for j, d in enumerate(pb):
        v_batch[p_lab[d][1]] = vb[j]
    # labels of the second dot_general's output dims
    out_lab = ([p_lab[d] for d in pb] + [p_lab[d] for d in p_free] + [("EV",)] if p_lhs
               else [p_lab[d] for d in pb] + [("EV",)] + [p_lab[d] for d in p_free])
    if mask is not None:  # to the op's layout: [batch (the scores' order)..., L, S]
        want = labels[:nb] + [("q", d) for d in units] + [("q", q_l), ("S",)]
        mask = np.ascontiguousarray(mask.transpose([p_lab.index(lb) for lb in want]))
        mask = one_copy(mask.reshape(mask.shape[:nb] + mask.shape[-2:]))
    return dict(q=q0, k=k0, v=v, scale=c * cq * ck, mask=mask,
                q_perm=tuple(qb) + tuple(units) + (q_l, qc[0]),
                k_perm=tuple(kb) + (kf[0], kc[0]),
                v_perm=tuple(v_batch) + (vc[0], v_free[0]),
                units=[q.shape[d] for d in units], q_l=q_l, out_lab=out_lab,
                out_type=d2.output.type, general=True)


def build_general(app, m, std) -> Value:
    q = std(app, m["q"], m["q_perm"])
    nu = len(m["units"])
    if nu:
        q = app.add("reshape", q, shape=tuple(q.shape[:-2 - nu]) + tuple(q.shape[-2:]))
    k, v = std(app, m["k"], m["k_perm"]), std(app, m["v"], m["v_perm"])
    ins = [q, k, v] + ([app.add("constant", value=m["mask"])] if m["mask"] is not None
                       else [])
    out = app.add("attention", *ins, scale=float(m["scale"]), has_mask=m["mask"] is not None)
    nb = out.type.rank - 2
    lab = [("b", i) for i in range(nb)] + [("q", m["q_l"]), ("EV",)]
    qf_units = [lb for lb in m["out_lab"] if lb[0] == "q" and lb != ("q", m["q_l"])]
    if qf_units:
        out = app.add("reshape", out, shape=tuple(out.shape) + (1,) * len(qf_units))
        lab += qf_units
    perm = tuple(lab.index(lb) for lb in m["out_lab"])
    out = std(app, out, perm)
    assert out.type == m["out_type"], (out.type, m["out_type"])
    return out
