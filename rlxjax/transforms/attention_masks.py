"""Boolean attention masks applied through ``where`` (used by recognize_attention).

flax (``mask=``, ``make_causal_mask``, its gemma example's K_MASK) and
jax.nn.dot_product_attention (``mask=``, ``is_causal``) mask the scores with
``where(mask, scores, fill)``, ``fill`` a large negative constant (flax: finfo(dtype).min
or -2.38e38; jax: 0.7·finfo(dtype).min). When ``exp(fill − next float above fill)`` is 0
in the scores' dtype, any row whose max unmasked score is above ``fill`` gives its masked
entries exactly 0 weight (refused e.g. for fill = -1e9 in fp32, whose neighbours are 64
apart: Keras' Softmax layer's fill), and a row with no True is uniform. The fused op then
takes

- the additive mask ``where(mask, 0, -inf)`` when the mask is a compile-time constant
  (computed from constants alone, e.g. an iota comparison, evaluated here by each op's
  fold implementation) with a True in every softmax row: the same function;
- else the mask itself as the op's bool mask (rlxjax/ir/attention.py), whose meaning is
  exactly this: False entries weigh 0, a row with no True is uniform (finite, as JAX).

A fill of -inf is the additive mask ``where(mask, 0, -inf)`` (a row with no True is NaN,
as in JAX). The one input where a finite fill and the fused op still differ: a row whose
unmasked scores are all ≤ ``fill`` (within 0.7 of the dtype's overflow): JAX then weights
the masked entries, the fused op does not. docs/numerics.md says so.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Value
from ..ir.ops import OPS
from . import fold as _fold  # noqa: F401  (registers the fold implementations)

_MAX_SIZE = 1 << 22


def const_value(v: Value, depth: int = 0) -> Optional[np.ndarray]:
    """``v``'s value if it is computed from constants alone (iota and friends included)."""
    n = v.node
    if n is None or depth > 24 or not v.type.is_static or v.type.size > _MAX_SIZE:
        return None
    if n.op == "constant":
        return np.asarray(n.params["value"])
    opdef = OPS.get(n.op)
    fn = opdef.impl("fold") if opdef is not None and opdef.pure else None
    if fn is None or len(n.outputs) != 1:
        return None
    args = []
    for u in n.inputs:
        args.append(const_value(u, depth + 1))
        if args[-1] is None:
            return None
    with np.errstate(all="ignore"):
        r = fn(n.params, *args)
    return None if r is None or isinstance(r, tuple) else np.asarray(r)


def _scalar_fill(v: Value) -> Optional[float]:
    while v.node is not None and v.node.op == "broadcast_in_dim":
        v = v.node.inputs[0]
    c = const_value(v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _select_parts(sel: Value, allow_inf: bool = False) -> Optional[tuple]:
    """(pred, scores) if ``sel = select(pred, fill, scores)`` with a fill far enough below
    every score that exp(fill − any larger float) is 0 (module docstring); -inf too
    when ``allow_inf``."""
    n = sel.node
    if n is None or n.op != "select":
        return None
    pred, on_false, on_true = n.inputs
    if tuple(on_true.shape) != tuple(sel.shape) or on_true.dtype != sel.dtype:
        return None
    fill = _scalar_fill(on_false)
    if fill is None or np.isnan(fill) or fill == np.inf:
        return None
    if fill == -np.inf:
        return (pred, on_true) if allow_inf else None
    dt = sel.dtype.np
    f = np.asarray(fill, dt)
    with np.errstate(all="ignore"):
        if np.exp(f - np.nextafter(f, np.asarray(0, dt))) != 0:
            return None
    return pred, on_true


def additive_mask(sel: Value, scores_shape) -> Optional[tuple]:
    """(scores, additive mask as a numpy array) if ``sel = select(pred, fill, scores)`` is
    the same function as ``scores + where(pred, 0, -inf)`` (module docstring)."""
    parts = _select_parts(sel)
    if parts is None:
        return None
    pred, on_true = parts
    m = const_value(pred)
    if m is None or m.dtype != np.bool_:
        return None
    try:
        full = np.broadcast_to(m, tuple(scores_shape))
    except ValueError:
        return None
    if not full.any(axis=-1).all():
        return None
    dt = sel.dtype.np
    return on_true, one_copy(np.where(m, np.asarray(0, dt), np.asarray(-np.inf, dt)))


def where_mask(sel: Value) -> Optional[tuple]:
    """(scores, mask) if ``sel = select(pred, fill, scores)`` is the fused op's masking:
    the additive 0/-inf constant where :func:`additive_mask` gives it, else ``pred`` as a
    bool mask (a numpy array when constant, else the Value itself), which the op defines
    as this ``where`` computes (rows with no True uniform). A fill of -inf (rows with no
    True are NaN, in JAX too) is the additive mask where(pred, 0, -inf): a constant, or
    ("-inf", pred) for the caller to build."""
    add = additive_mask(sel, sel.shape)
    if add is not None:
        return add
    parts = _select_parts(sel, allow_inf=True)
    if parts is None:
        return None
    pred, on_true = parts
    if pred.dtype.np != np.bool_ or tuple(pred.shape) != tuple(sel.shape):
        return None
    m = const_value(pred)
    if _scalar_fill(sel.node.inputs[1]) == -np.inf:  # where(m, s, -inf) = s + where(m, 0, -inf)
        if m is None:
            return on_true, ("-inf", pred)
        dt = sel.dtype.np
        return on_true, one_copy(np.where(m, np.asarray(0, dt), np.asarray(-np.inf, dt)))
    return on_true, (pred if m is None else one_copy(np.broadcast_to(m, tuple(sel.shape))))


def one_copy(m: np.ndarray) -> np.ndarray:
    """``m`` with each leading dim it is constant along cut to size 1 (it broadcasts back)."""
    for axis in range(m.ndim - 2):
        first = m.take([0], axis)
        if (m == first).all():
            m = first
    return m
