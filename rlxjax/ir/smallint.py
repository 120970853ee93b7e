"""int8 / uint8 RLX values in formats whose int ops are int32 (Core ML, Core AI): they are
carried as int32 values holding the same number and wrapped into range after every op that
may leave it. Which ops cannot is a fact about the RLX ops, shared by both lowerings
(coreml/smallint.py and coreai/ops_base.py write the wrap in their own ops)."""
from __future__ import annotations

from typing import Optional

from .types import DType

SMALL = (DType.i8, DType.u8)

#: RLX ops whose i8 / u8 results are in range whenever their i8 / u8 operands are: no wrap
PRESERVING = frozenset({
    "constant", "broadcast_in_dim", "concatenate", "pad", "reshape", "rev", "slice", "split",
    "transpose", "gather_nd", "dynamic_slice", "dynamic_update_slice", "select", "clamp",
    "max", "min", "reduce_max", "reduce_min", "reduce_window_max", "reduce_window_min",
    "sign", "rem", "stop_gradient", "convert", "cond", "while", "scan", "custom_vjp",
})


def carried(d: DType) -> DType:
    """The dtype an RLX value of dtype ``d`` is carried in (int8 / uint8: int32)."""
    return DType.i32 if d in SMALL else d


def needs_wrap(op: str, scatter_mode: Optional[str] = None) -> bool:
    """Whether the i8 / u8 result of RLX op ``op`` must be wrapped into range."""
    if op == "scatter_nd":  # set / max / min move values; add / mul compute
        return scatter_mode not in ("update", "max", "min")
    return op not in PRESERVING
