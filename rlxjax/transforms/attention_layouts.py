"""Attention in any layout (used by recognize_attention when the plain one does not match).

jax.nn.dot_product_attention (implementation='xla', so also nnx.MultiHeadAttention), the
grouped-query einsums of keras-hub (Gemma, Llama, Mistral: ``btkgh,bskh->bkgts``) and of
flax's gemma example (``BTKGH,BSKH->BTKGS``, its logits reshaped to [B, T, K·G, S] around
the softmax), multi-query attention (k and v without a head dim) and decode steps (L = 1)
all compute

    scores = dot_general(q·c_q, k·c_k)                   k: one free dim (S)
    X      = layout ops / scalar muls / masks of scores  transpose, reshape (regrouping
                                                         dims), ·c; at most one mask,
                                                         above the muls: + M (M
                                                         broadcasting to the scores)
                                                         or where(pred, ·, fill)
    P      = layout ops of softmax(X, the S dim)
    out    = dot_general(P, v) or dot_general(v, P)      contracting S with v's one
                                                         contracted dim

``match_general`` labels each dim of every value on that chain by the dims of the first
dot_general's result it holds (a batch dim, a free dim of q, S; a reshape merges or splits
them) and accepts the chain when P contracts S with v, pairs every batch dim of the scores
with one of v's, and its free dims hold exactly q's free dims. Grouped and multi-query
attention are then ordinary attention whose query rows are q's free dims flattened
(the heads sharing a K/V head and the positions): q is moved to [batch..., L, E] with L
the product of its free dims, the mask likewise (materialised to the scores' shape), and
the result back to the second dot_general's layout - only data movement around the same
function. A mask is additive (``+ M``, M of the scores' shape and dtype) or a ``where``
(attention_masks.py: a constant mask stays the additive 0/-inf constant when every row has
a True, else it is passed as a bool, which the op defines as JAX's ``where`` gives).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..ir import Value
from ..ir.ops import broadcast_shapes
from .attention_masks import const_value, one_copy, where_mask


def _free(rank, batch, contract):
    return [d for d in range(rank) if d not in batch and d not in contract]


def _regroup(groups, sizes, shape, from_right=False) -> Optional[list]:
    """The label groups of a reshape of a value with ``groups`` to ``shape`` (merging and
    splitting whole labels only), or None. Where labels of size 1 could go to more than
    one dim (any place is the same data), they are taken from the left or the right."""
    if from_right:
        out = _regroup([g[::-1] for g in groups[::-1]], sizes, tuple(shape)[::-1])
        return None if out is None else [g[::-1] for g in out[::-1]]
    flat = [lb for g in groups for lb in g]
    out, i = [], 0
    for n in shape:
        g, prod = [], 1
        if n == 1:
            if i < len(flat) and sizes[flat[i]] == 1:
                g, i = [flat[i]], i + 1
        while prod < n and i < len(flat):
            g.append(flat[i])
            prod *= sizes[flat[i]]
            i += 1
        if prod != n:
            return None
        out.append(g)
    if any(sizes[lb] != 1 for lb in flat[i:]):
        return None
    if flat[i:]:
        if not out:
            return None
        out[-1] = out[-1] + flat[i:]
    return out


def _walk(p_val: Value, unscaled):
    """The chain from P down to the first dot_general: (ops top-down, the dot_general node,
    the scale) or None. Each op is (kind, value, extra)."""
    ops, v, scale = [], p_val, 1.0
    seen_softmax = seen_scale = False
    masks: List[str] = []  # at most one: a where or an add
    for _ in range(64):
        n = v.node
        if n is None:
            return None
        if n.op == "dot_general" and seen_softmax:
            return ops, n, scale
        if n.op in ("transpose", "reshape"):
            ops.append((n.op, v, n.params))
            v = n.inputs[0]
            continue
        if n.op == "softmax" and not seen_softmax:
            seen_softmax = True
            ops.append(("softmax", v, n.params["axis"]))
            v = n.inputs[0]
            continue
        if not seen_softmax:
            return None
        if n.op == "select" and not masks and not seen_scale:
            w = where_mask(v)
            if w is None:
                return None
            ops.append(("where", v, w[1]))
            masks.append("where")
            v = w[0]
            continue
        if n.op == "add" and not masks and not seen_scale:
            for t, m in (n.inputs, n.inputs[::-1]):
                if (m.dtype == v.dtype and tuple(t.shape) == tuple(v.shape)
                        and m.type.rank <= v.type.rank
                        and broadcast_shapes(m.shape, v.shape) == tuple(v.shape)
                        and _scores_like(t)):
                    break
            else:
                return None
            ops.append(("add", v, m))
            masks.append("add")
            v = t
            continue
        c, u = unscaled(v)
        if u is v or u.type.rank != v.type.rank or u.dtype != v.dtype:
            return None
        scale *= c
        seen_scale = True
        v = u
    return None


def _scores_like(t: Value) -> bool:
    """``t`` is not itself a mask (it is computed from a dot_general, not a constant)."""
    return t.node is not None and t.node.op != "constant" and const_value(t) is None


def match_general(d2, unscaled, bool_masks: bool = True) -> Optional[dict]:
    """The pattern of the module docstring at the second dot_general ``d2`` (with a bool
    mask only if ``bool_masks``)."""
    (lb, rb), (lc, rc) = d2.params["batch"], d2.params["contract"]
    a, b = d2.inputs
    for p_val, v, pb, pc, vb, vc, p_lhs in ((a, b, lb, lc, rb, rc, True),
                                            (b, a, rb, rc, lb, lc, False)):
        if len(pc) != 1 or len(vc) != 1 or len(pb) != len(vb):
            continue
        m = _match_one(d2, p_val, v, tuple(pb), pc[0], tuple(vb), vc[0], p_lhs, unscaled)
        if m is not None and not bool_masks and _is_bool_mask(m["mask"]):
            return None
        if m is not None:
            return m
    return None


def _match_one(d2, p_val, v, pb, pc, vb, vc, p_lhs, unscaled) -> Optional[dict]:
    walked = _walk(p_val, unscaled)
    if walked is None:
        return None
    ops = walked[0]
    for from_right in ((False, True) if any(op[0] == "reshape" for op in ops) else (False,)):
        m = _match_layout(walked, d2, p_val, v, pb, pc, vb, vc, p_lhs, unscaled, from_right)
        if m is not None:
            return m
    return None


def _match_layout(walked, d2, p_val, v, pb, pc, vb, vc, p_lhs, unscaled, from_right):
    ops, d1, scale = walked
    (xb, yb), (xc, yc) = d1.params["batch"], d1.params["contract"]
    x, y = d1.inputs
    if len(xc) != 1 or x.dtype != p_val.dtype:
        return None
    nb = len(xb)
    labels = ([("b", i) for i in range(nb)] + [("x", d) for d in _free(x.type.rank, xb, xc)]
              + [("y", d) for d in _free(y.type.rank, yb, yc)])
    sizes = dict(zip(labels, d1.output.shape))
    groups = [[lb] for lb in labels]
    axis_group, mask = None, None
    for kind, val, extra in reversed(ops):  # bottom-up: the layout of each value
        if kind == "transpose":
            groups = [groups[i] for i in extra["perm"]]
        elif kind == "reshape":
            groups = _regroup(groups, sizes, val.shape, from_right)
            if groups is None:
                return None
        elif kind == "softmax":
            axis_group = groups[extra]
        else:
            mask = (kind, extra, [list(g) for g in groups])
    if axis_group is None or len(axis_group) != 1 or axis_group[0][0] == "b":
        return None
    (s_lab,) = axis_group
    # the operand holding S is k (one free dim), the other q
    if s_lab[0] == "x":
        (q, qb, qc), (k, kb, kc) = (y, yb, yc), (x, xb, xc)
        q_tag = "y"
    else:
        (q, qb, qc), (k, kb, kc) = (x, xb, xc), (y, yb, yc)
        q_tag = "x"
    if len(_free(k.type.rank, kb, kc)) != 1:
        return None
    q_free = [lb for lb in labels if lb[0] == q_tag]
    if not q_free or groups[pc] != [s_lab]:
        return None
    batch_labels = [("b", i) for i in range(nb)]
    if any(len(groups[d]) != 1 for d in pb) or sorted(groups[d][0] for d in pb) != batch_labels:
        return None
    p_free = _free(p_val.type.rank, pb, (pc,))
    l_order = [lb for d in p_free for lb in groups[d]]
    if sorted(l_order) != sorted(q_free):
        return None
    v_free = _free(v.type.rank, vb, (vc,))
    if len(v_free) != 1:
        return None
    cq, q0 = unscaled(q)
    ck, k0 = unscaled(k)
    if q0.type.rank != q.type.rank or k0.type.rank != k.type.rank:
        return None
    v_batch = [None] * nb
    for j, d in enumerate(pb):
        v_batch[groups[d][0][1]] = vb[j]
    want = batch_labels + l_order + [s_lab]
    mask_kind, mask_val = _mask_to_layout(mask, want, sizes, nb)
    if mask_kind == "refuse":
        return None
    return dict(q=q0, k=k0, v=v, scale=scale * cq * ck, mask=mask_val,
                q_perm=tuple(qb) + tuple(lb[1] for lb in l_order) + tuple(qc),
                k_perm=tuple(kb) + tuple(_free(k.type.rank, kb, kc)) + tuple(kc),
                v_perm=tuple(v_batch) + (vc, v_free[0]),
                l_sizes=[sizes[lb] for lb in l_order],
                p_free_shape=[p_val.shape[d] for d in p_free], pb=pb, p_lhs=p_lhs,
                batch_order=[groups[d][0][1] for d in pb],
                out_type=d2.output.type, general=True)


def _is_bool_mask(mask) -> bool:
    if isinstance(mask, np.ndarray):
        return mask.dtype == np.bool_
    return mask is not None and mask[0].dtype.np == np.bool_ and not mask[-1]


def _mask_to_layout(mask, want, sizes, nb) -> Tuple[str, object]:
    """The mask moved to the op's layout [batch..., L, S]: ("none", None), ("const", array),
    ("value", (Value, split shape, perm, final shape)), or ("refuse", None)."""
    if mask is None:
        return "none", None
    kind, m, groups = mask
    flat = [lb for g in groups for lb in g]
    if sorted(flat) != sorted(want):
        return "refuse", None
    split = tuple(sizes[lb] for lb in flat)
    perm = tuple(flat.index(lb) for lb in want)
    final = tuple(sizes[lb] for lb in want[:nb])
    final += (int(np.prod([sizes[lb] for lb in want[nb:-1]])), sizes[want[-1]])
    if isinstance(m, tuple):  # where(pred, ·, -inf): built as the additive mask
        kind, m = "-inf", m[1]
    if isinstance(m, np.ndarray):
        m = np.broadcast_to(m, tuple(int(np.prod([sizes[lb] for lb in g])) for g in groups))
        a = np.ascontiguousarray(np.reshape(m, split).transpose(perm)).reshape(final)
        return "const", one_copy(a)
    full = tuple(int(np.prod([sizes[lb] for lb in g])) for g in groups)
    return "value", (m, split, perm, final, full, kind == "-inf")


def build_general(app, m, std) -> Value:
    q = std(app, m["q"], m["q_perm"])
    nb = len(m["pb"])
    lead = tuple(q.shape[:nb])
    L = int(np.prod(m["l_sizes"]))
    if len(m["l_sizes"]) != 1:
        q = app.add("reshape", q, shape=lead + (L, q.shape[-1]))
    k, v = std(app, m["k"], m["k_perm"]), std(app, m["v"], m["v_perm"])
    mask = m["mask"]
    if isinstance(mask, np.ndarray):
        mask = app.add("constant", value=mask)
    elif mask is not None:
        val, split, perm, final, full, inf = mask
        if inf:  # where(pred, s, -inf) = s + where(pred, 0, -inf)
            dt = m["out_type"].dtype.np
            zero, ninf = (app.add("broadcast_in_dim", app.add("constant", value=np.asarray(c, dt)),
                                  dims=(), shape=full) for c in (0, -np.inf))
            val = app.add("select", val, ninf, zero)
        if tuple(val.shape) != full:  # an additive mask broadcasting to the scores
            off = len(full) - val.type.rank
            val = app.add("broadcast_in_dim", val, dims=tuple(range(off, len(full))),
                          shape=full)
        if tuple(val.shape) != split:
            val = app.add("reshape", val, shape=split)
        val = std(app, val, perm)
        mask = val if tuple(val.shape) == final else app.add("reshape", val, shape=final)
    ins = [q, k, v] + ([mask] if mask is not None else [])
    out = app.add("attention", *ins, scale=float(m["scale"]), has_mask=mask is not None)
    ev = out.shape[-1]
    # [batch (label order)..., L, EV] -> [batch..., P's free dims..., EV] -> d2's order
    pf = tuple(m["p_free_shape"])
    if pf != (L,):
        out = app.add("reshape", out, shape=lead + pf + (ev,))
    nf = len(pf)
    # labels now: batch i -> i, P free j -> nb + j, EV -> nb + nf
    order_b = list(m["batch_order"])
    free_pos = list(range(nb, nb + nf))
    perm = order_b + (free_pos + [nb + nf] if m["p_lhs"] else [nb + nf] + free_pos)
    out = std(app, out, tuple(perm))
    assert out.type == m["out_type"], (out.type, m["out_type"])
    return out
