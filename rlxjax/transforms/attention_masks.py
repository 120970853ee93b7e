"""Boolean attention masks applied through ``where`` (used by recognize_attention).

flax (``mask=``, ``make_causal_mask``) and jax.nn.dot_product_attention(is_causal=True)
mask the scores with ``where(mask, scores, fill)``, ``fill`` a large negative constant
(flax: finfo(dtype).min; jax: 0.7·finfo(dtype).min). The fused op takes the additive mask
``where(mask, 0, -inf)`` instead, which is the same function when

- the mask is a compile-time constant (computed from constants alone, e.g. an iota
  comparison, evaluated here by each op's fold implementation) and every softmax row has
  at least one True (a fully masked row is uniform in JAX and NaN with -inf: refused);
- ``exp(fill − next float above fill)`` is 0 in the scores' dtype, so any row whose max
  unmasked score is above ``fill`` gives its masked entries exactly 0 weight, as -inf does
  (refused e.g. for fill = -1e9 in fp32, whose neighbours are 64 apart).

The one input where the two still differ: a row whose unmasked scores are all ≤ ``fill``
(-inf, or within 0.7 of the dtype's overflow): JAX then weights the masked entries, the
fused op gives NaN. docs/numerics.md says so.
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


def additive_mask(sel: Value, scores_shape) -> Optional[tuple]:
    """(scores, additive mask as a numpy array) if ``sel = select(pred, fill, scores)`` is
    the same function as ``scores + where(pred, 0, -inf)`` (module docstring)."""
    n = sel.node
    if n is None or n.op != "select":
        return None
    pred, on_false, on_true = n.inputs
    if tuple(on_true.shape) != tuple(sel.shape) or on_true.dtype != sel.dtype:
        return None
    fill = _scalar_fill(on_false)
    if fill is None or not np.isfinite(fill):
        return None
    dt = sel.dtype.np
    f = np.asarray(fill, dt)
    with np.errstate(all="ignore"):
        if np.exp(f - np.nextafter(f, np.asarray(0, dt))) != 0:
            return None
    m = const_value(pred)
    if m is None or m.dtype != np.bool_:
        return None
    try:
        full = np.broadcast_to(m, tuple(scores_shape))
    except ValueError:
        return None
    if not full.any(axis=-1).all():
        return None
    return on_true, one_copy(np.where(m, np.asarray(0, dt), np.asarray(-np.inf, dt)))


def one_copy(m: np.ndarray) -> np.ndarray:
    """``m`` with each leading dim it is constant along cut to size 1 (it broadcasts back)."""
    for axis in range(m.ndim - 2):
        first = m.take([0], axis)
        if (m == first).all():
            m = first
    return m
