"""How a decomposition meets the values a format carries in a wider dtype: its policy.

Every format carries int8 / uint8 values in int32 and wraps each op's result into range
(rlxjax/ir/smallint.py); a format may carry fp16 values in fp32 and round each op's result
to fp16 (Core AI in an fp32 program, rlxjax/ir/halfcarry.py). Op for op, a decomposition
would then wrap / round after every op it emits, where the composite op it stands for -
computed by XLA in the wide dtype - wraps / rounds once. A decomposition marked
``round_once`` is therefore built on such operands converted to the carrier's dtype, and
its results are converted back: the carrier sees one wrap / rounding, at the end, as the
composite op's own rule gave (fp16 only where the format says it carries it:
``legalize(..., carried_f16=True)``). A format computing fp16 natively (Core ML, Core AI at
precision fp16 / mixed) gets the decomposition in fp16, op for op.
"""
from __future__ import annotations

from ...ir import DType

_SMALL = {DType.i8: DType.i32, DType.u8: DType.i32}


def round_once(fn):
    """Mark the decomposition ``fn`` as one a carried dtype wraps / rounds once."""
    fn.round_once = True
    return fn


def decompose(fn, b, node, ins, carried_f16: bool):
    """``fn(b, node, ins)`` under its policy (see the module docstring)."""
    wider = {**_SMALL, **({DType.f16: DType.f32} if carried_f16 else {})}
    if not (getattr(fn, "round_once", False) and any(v.type.dtype in wider for v in ins)):
        return fn(b, node, ins)
    wide = [b.add("convert", v, dtype=wider[v.type.dtype]) if v.type.dtype in wider else v
            for v in ins]
    outs = fn(b, node, wide)
    return [b.add("convert", o, dtype=v.type.dtype) if o.type.dtype != v.type.dtype else o
            for o, v in zip(outs, node.outputs)]
