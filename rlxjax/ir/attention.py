"""The attention family of RLX ops: fused scaled dot-product attention and its backward.

  attention       [q, k, v, mask?]        scale, has_mask
      q [..., L, E], k [..., S, E], v [..., S, EV] (the same leading dims ``...``), mask
      broadcasting to [..., L, S], either a float added to the scores:
      out = softmax(q·kᵀ·scale + mask, over S)·v                  [..., L, EV]
      or a bool saying which scores take part (what ``where(mask, scores, fill)`` computes
      for a fill far below every score, recognize_attention checks that): the weights of
      the False entries are 0, and a row with no True is uniform over S (out = the mean of
      v over S: JAX's value, finite, where an additive -inf mask gives NaN).
  attention_grad  [q, k, v, mask?, dout]  scale, has_mask, outputs ⊆ (dq, dk, dv, dmask)
      recomputes the probabilities from q, k and the mask (nothing saved but the inputs);
      no dmask for a bool mask, and a score a bool mask leaves out gets no gradient (its
      row's dq and the dk of its key are as if it were not there, as through ``where``).

transforms/recognize_attention.py makes these from jax / flax code; coreml/rules/attention.py
lowers the forward to MIL ``scaled_dot_product_attention`` on iOS18 (decomposed before).
"""
from __future__ import annotations

from .ops import _require, broadcast_shapes, defop
from .schema import BOOL, FLOAT, STRS, Param
from .types import DType

PARAMS = {"scale": Param(FLOAT), "has_mask": Param(BOOL)}
GRADS = ("dq", "dk", "dv", "dmask")


def check_operands(ts, p, op):
    """-> (q, k, v, mask-or-None, the scores' shape)."""
    _require(len(ts) == 3 + int(p["has_mask"]), f"{op}: expected q, k, v"
             f"{', mask' if p['has_mask'] else ''}, got {len(ts)} inputs")
    q, k, v = ts[:3]
    mask = ts[3] if p["has_mask"] else None
    _require(q.dtype.is_float and k.dtype == q.dtype and v.dtype == q.dtype,
             f"{op}: q, k, v must share one float dtype, got {q}, {k}, {v}")
    _require(q.rank >= 3 and k.rank == q.rank and v.rank == q.rank,
             f"{op}: q, k, v need the same rank >= 3, got {q}, {k}, {v}")
    lead = tuple(q.shape[:-2])
    _require(tuple(k.shape[:-2]) == lead and tuple(v.shape[:-2]) == lead,
             f"{op}: leading dims differ: {q}, {k}, {v}")
    _require(k.shape[-1] == q.shape[-1], f"{op}: q {q} and k {k} differ in depth")
    _require(v.shape[-2] == k.shape[-2], f"{op}: k {k} and v {v} differ in length")
    scores = lead + (q.shape[-2], k.shape[-2])
    if mask is not None:
        _require(mask.dtype == q.dtype or mask.dtype == DType.bool,
                 f"{op}: mask {mask} must have q's dtype or be bool")
        _require(mask.rank <= len(scores) and broadcast_shapes(mask.shape, scores) == scores,
                 f"{op}: mask {mask} does not broadcast to the scores {scores}")
    return q, k, v, mask, scores


@defop("attention", "attention", None, params=PARAMS, backward=("attention_grad",))
def _attention(ts, p):
    q, k, v, _, _ = check_operands(ts, p, "attention")
    return [q.with_shape(tuple(q.shape[:-1]) + (v.shape[-1],))]


@defop("attention_grad", "attention_grad", None, params={**PARAMS, "outputs": Param(STRS)})
def _attention_grad(ts, p):
    outs = p["outputs"]
    _require(isinstance(outs, tuple) and outs and list(outs) == [g for g in GRADS if g in outs],
             f"attention_grad: outputs {outs} must be distinct, in the order {GRADS}")
    _require("dmask" not in outs or p["has_mask"], "attention_grad: dmask without a mask")
    q, k, v, mask, _ = check_operands(ts[:-1], p, "attention_grad")
    _require("dmask" not in outs or mask.dtype.is_float, "attention_grad: dmask of a bool mask")
    dout = ts[-1]
    _require(dout == q.with_shape(tuple(q.shape[:-1]) + (v.shape[-1],)),
             f"attention_grad: cotangent {dout} does not match the output")
    by = {"dq": q, "dk": k, "dv": v, "dmask": mask}
    return [by[g] for g in outs]
