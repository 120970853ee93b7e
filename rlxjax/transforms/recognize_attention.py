"""Recognise scaled dot-product attention as the fused RLX ``attention`` op.

``recognize_attention(graph)`` rewrites ``graph`` in place and returns ``{"attention": n}``
(``attention_bool_masks=False``: no op with a bool mask, for a format that lowers none).
It runs after recognize_activations, so the softmax is already one node. The pattern:

    scores = dot_general(q·c_q, k·c_k) · c (+ mask)     one contracted dim (E), one free
                                                        dim each (L for q, S for k), any
                                                        number of batch dims
    P      = softmax(scores, last axis)                 (S)
    out    = dot_general(P, v) or dot_general(v, P)     contracting S, the same batch dims

with ``c_q``, ``c_k``, ``c`` scalar constants (their product is the op's ``scale``: flax
divides q by sqrt(depth), a hand-written block divides the scores) and ``mask`` a float of
the scores' dtype added to them. q, k and v are transposed to the op's layout
([batch..., L, E], [batch..., S, E], [batch..., S, EV]) and the result back to the layout
the second dot_general produced. Every other layout (jax.nn.dot_product_attention's,
grouped-query and multi-query attention, logits reshaped around the softmax, masks that
are inputs) is matched by attention_layouts.py. A boolean mask through ``where``
(``select``) becomes an additive 0/-inf mask when that is the same function, else the
op's bool mask (attention_masks.py). Everything else (a softmax over another axis, a
batch dim of v paired differently, a fill too close to the scores, two masks at once,
scores soft-capped or otherwise transformed) stays as it is.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..ir import Graph, Value, verify
from .attention_layouts import build_general, match_general
from .attention_masks import additive_mask
from .recognize_activations import _split
from .rewrite import Appender, dce, substitute

__all__ = ["recognize_attention"]


def recognize_attention(graph: Graph, attention_bool_masks: bool = True) -> Dict[str, int]:
    matches = {}
    for node in graph.nodes:
        if node.op == "dot_general" and node.output.dtype.is_float and node.output.type.is_static:
            m = _match(node, attention_bool_masks)
            if m is not None:
                matches[id(node)] = m
    if not matches:
        return {}
    order, mapping = [], {}
    for n in list(graph.nodes):
        m = matches.get(id(n))
        if m is not None:
            app = Appender(graph, source=n.source)
            mapping[n.output.id] = _build(app, m)
            order.extend(app.nodes)
        order.append(n)
    graph.nodes = order
    substitute(graph, mapping)
    _compose_transposes(graph, {v.id for v in mapping.values()})
    dce(graph)
    verify(graph)
    return {"attention": len(matches)}


def _compose_transposes(graph: Graph, made: set) -> None:
    """A transpose reading a transpose this pass made (flax moves the heads back right after
    the attention) becomes one transpose of the attention's result."""
    for n in graph.nodes:
        src = n.inputs[0].node if n.op == "transpose" else None
        if src is not None and src.op == "transpose" and src.output.id in made:
            inner, outer = src.params["perm"], n.params["perm"]
            n.inputs = (src.inputs[0],)
            n.params = type(n.params)({"perm": tuple(inner[i] for i in outer)})


def _free(rank, batch, contract) -> List[int]:
    return [d for d in range(rank) if d not in batch and d not in contract]


def _unscaled(v: Value) -> Tuple[float, Value]:
    """(c, u) with ``v = c·u`` (c = 1 and u = v when v is not a scaled value)."""
    coef, rest = _split(v)
    if len(rest) == 1 and coef == coef and rest[0].id != v.id:
        return coef, rest[0]
    return 1.0, v


def _match(d2, bool_masks: bool = True) -> Optional[dict]:
    (lb, rb), (lc, rc) = d2.params["batch"], d2.params["contract"]
    a, b = d2.inputs
    for p_val, v, pb, pc, vb, vc, p_lhs in ((a, b, lb, lc, rb, rc, True),
                                            (b, a, rb, rc, lb, lc, False)):
        pn = p_val.node
        if pn is None or pn.op != "softmax":
            continue
        r = p_val.type.rank
        nb = r - 2
        if nb < 1 or pn.params["axis"] != r - 1:
            continue
        if tuple(pb) != tuple(range(nb)) or tuple(pc) != (nb + 1,) or len(vc) != 1:
            continue
        v_free = _free(v.type.rank, vb, vc)
        if len(v_free) != 1 or v.type.rank != r:
            continue
        scores = _scores(pn.inputs[0], nb)
        if scores is None:
            continue
        return dict(scores, v=v, v_perm=tuple(vb) + (vc[0], v_free[0]), p_lhs=p_lhs, nb=nb,
                    out_type=d2.output.type)
    return match_general(d2, _unscaled, bool_masks)


def _scores(s: Value, nb: int) -> Optional[dict]:
    mask = None
    n = s.node
    where = additive_mask(s, s.shape) if n is not None and n.op == "select" else None
    if where is not None:  # where(bool mask, scores, fill): attention_masks.py
        d = _dot_part(where[0], nb)
        if d is not None:
            d["mask"] = where[1]
        return d
    if n is not None and n.op == "add":
        for t, m in (n.inputs, n.inputs[::-1]):
            if (m.dtype == s.dtype and tuple(t.shape) == tuple(s.shape)
                    and len(m.shape) <= len(s.shape) and _dot_part(t, nb) is not None):
                s, mask = t, m
                break
        else:
            return None
    d = _dot_part(s, nb)
    if d is None:
        return None
    d["mask"] = mask
    return d


def _dot_part(t: Value, nb: int) -> Optional[dict]:
    c, d1 = _unscaled(t)
    n = d1.node
    if n is None or n.op != "dot_general":
        return None
    (qb, kb), (qc, kc) = n.params["batch"], n.params["contract"]
    q, k = n.inputs
    if len(qb) != nb or len(qc) != 1 or q.type.rank != nb + 2 or k.type.rank != nb + 2:
        return None
    qf, kf = _free(q.type.rank, qb, qc), _free(k.type.rank, kb, kc)
    if len(qf) != 1 or len(kf) != 1:
        return None
    cq, q0 = _unscaled(q)
    ck, k0 = _unscaled(k)
    if q0.type.rank != q.type.rank or k0.type.rank != k.type.rank:
        return None
    return {"q": q0, "k": k0, "scale": c * cq * ck,
            "q_perm": tuple(qb) + (qf[0], qc[0]), "k_perm": tuple(kb) + (kf[0], kc[0])}


def _std(app, v: Value, perm) -> Value:
    return v if tuple(perm) == tuple(range(len(perm))) else app.add("transpose", v, perm=perm)


def _build(app, m) -> Value:
    if m.get("general"):
        return build_general(app, m, _std)
    q, k, v = (_std(app, m[n], m[n + "_perm"]) for n in ("q", "k", "v"))
    mask = m["mask"]
    if mask is not None and not isinstance(mask, Value):  # from a boolean mask
        mask = app.add("constant", value=mask)
    ins = [q, k, v] + ([mask] if mask is not None else [])
    out = app.add("attention", *ins, scale=float(m["scale"]), has_mask=m["mask"] is not None)
    if not m["p_lhs"]:  # the second dot_general gave [batch..., EV, L]
        nb = m["nb"]
        out = app.add("transpose", out, perm=tuple(range(nb)) + (nb + 1, nb))
    assert out.type == m["out_type"], (out.type, m["out_type"])
    return out
