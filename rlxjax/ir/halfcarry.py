"""fp16 RLX values in a format whose own fp16 arithmetic is not XLA's (Core AI: its fp16
matmul accumulates in fp16): they are carried as fp32 values holding the same number and
rounded to fp16 (f32 -> f16 -> f32, round to nearest even, overflow to inf) after every op
whose fp32 result may not be an fp16 value.

That is what XLA:CPU does for f16 (measured, jax 0.10.2): elementwise ops are computed in
f32 and each result rounded (its fused loops may keep a product unrounded into a following
add); ``dot_general`` converts both operands to f32, runs an f32 dot
and rounds once. So add / sub / mul / div / sqrt are bit-equal (fp32 has >= 2p + 2 bits:
the double rounding is innocuous) and the rest are within fp32-then-round. Reductions
differ: XLA:CPU accumulates an f16 ``reduce`` in f16 (a reduce-window of 32 then a reduce:
its own order), the carried form sums in f32 and rounds once, which is never less accurate
(docs/coreai.md has the measured bound).

The facts here are about the RLX ops (which results are fp16 values already); the format
writes the rounding in its own ops (coreai/ops_base.py).
"""
from __future__ import annotations

from typing import Optional

from .types import DType

HALF = DType.f16

#: RLX ops whose result is an fp16 value whenever their fp16 operands are: they move,
#: select or compare values, or compute exactly (abs, neg, floor, ceil, round, sign; ``rem``
#: is fmod, exact; max / min)
EXACT = frozenset({
    "constant", "broadcast_in_dim", "concatenate", "pad", "reshape", "rev", "slice", "split",
    "transpose", "gather_nd", "dynamic_slice", "dynamic_update_slice", "select", "clamp",
    "max", "min", "reduce_max", "reduce_min", "reduce_window_max", "reduce_window_min",
    "select_and_gather_add", "abs", "neg", "floor", "ceil", "round", "sign", "rem",
    "stop_gradient", "cond", "while", "scan", "custom_vjp",
})

#: dtypes whose every value is an fp16 value: a convert from them needs no rounding
_WIDENED = (DType.f16, DType.bool, DType.i8, DType.u8)


def carried(d: DType) -> DType:
    """The dtype an fp16 RLX value is carried in (fp32); other dtypes are themselves."""
    return DType.f32 if d == HALF else d


def needs_round(op: str, src: Optional[DType] = None, scatter_mode: Optional[str] = None
                ) -> bool:
    """Whether the fp16 result of RLX op ``op`` (``src``: its first operand's dtype) must be
    rounded to fp16."""
    if op == "convert":
        return src not in _WIDENED
    if op == "scatter_nd":  # set / max / min move values; add / mul compute
        return scatter_mode not in ("update", "max", "min")
    return op not in EXACT
