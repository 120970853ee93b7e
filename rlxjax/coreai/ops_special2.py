"""The special functions of ir/special.py that Core AI lacks: ir/special_eval.py's
compositions (the ones the Core ML lowering evaluates) on ops_fx.py's ``Fx``, in float32:
``atan2``, ``cbrt``, ``nextafter`` (exact float arithmetic, no bitcast), ``erf_inv``,
``bessel_i0e`` / ``bessel_i1e``, ``lgamma``, ``digamma``, ``zeta``, ``polygamma``; and
ir/special_incomplete.py's loops: ``igamma``, ``igammac``, ``igamma_grad_a``, ``betainc``
(Core AI ``while``s over the operands at the result's shape, rank 0 as [1]).
Measured against float64 in docs/coreai.md.
"""
from __future__ import annotations

from ..ir import DType, special_eval, special_incomplete
from .ops_base import rule, unsupported
from .ops_fx import Fx
from .ops_linalg import widen


def _args(ctx, node, ins, f16: bool = False):
    """The operands at the result's shape (Core AI's where misbehaved on operands that
    broadcast along different dims: ops_linalg.py ``widen``), in fp32; ``f16``: fp16 values
    too (native ones cast to fp32 here; the caller casts the result back)."""
    t = node.outputs[0].type
    if t.dtype != DType.f32 and not (f16 and t.dtype == DType.f16):
        raise unsupported(node, f"{node.op} of {t.dtype} is not lowered for Core AI yet")
    if t.dtype == DType.f16 and ctx.native_f16:
        ins = [ctx.ca.cast(v, ctx.ca.float32) for v in ins]
    return Fx(ctx), [widen(ctx, v, t.shape, DType.f32) for v in ins]


def _composed(fn, f16: bool):
    """``f16``: fp16 values as XLA computes them, in fp32 rounded once (a carried fp16 value
    is rounded by Ctx.lower_nodes, a native one, precision fp16, cast). jax.jit gives
    exactly round(f(fp32(x))) for these functions on every finite fp16 (measured, 2026-12-02),
    but not for nextafter, which steps by one fp16 ulp: its fp16 stays refused."""
    def lower(ctx, node, ins):
        f, args = _args(ctx, node, ins, f16)
        out = fn(f, *args)
        if node.outputs[0].type.dtype == DType.f16 and ctx.native_f16:
            out = ctx.ca.cast(out, ctx.ca.float16)
        return out

    return lower


for _op, _fn, _f16 in (
        ("atan2", special_eval.atan2, True), ("cbrt", special_eval.cbrt, True),
        ("nextafter", special_eval.nextafter, False), ("erf_inv", special_eval.erf_inv, True),
        ("bessel_i0e", special_eval.i0e, True), ("bessel_i1e", special_eval.i1e, True),
        ("lgamma", special_eval.lgamma, True), ("digamma", special_eval.digamma, True),
        ("zeta", special_eval.zeta, False), ("polygamma", special_eval.polygamma, False)):
    rule(_op)(_composed(_fn, _f16))


def _looped(fn):
    """fp32, and fp16 values as XLA computes them: in fp32, rounded once (a carried fp16
    value is rounded by Ctx.lower_nodes; a native one, precision fp16, is cast)."""
    def lower(ctx, node, ins):
        t = node.outputs[0].type
        if t.dtype not in (DType.f32, DType.f16):
            raise unsupported(node, f"{node.op} of {t.dtype} is not lowered for Core AI")
        native = t.dtype == DType.f16 and ctx.native_f16
        if native:
            ins = [ctx.ca.cast(v, ctx.ca.float32) for v in ins]
        shape = tuple(t.shape) or (1,)
        args = [widen(ctx, v if ctx.shape(v) else ctx.reshape(v, (1,) * len(shape)), shape,
                      DType.f32) for v in ins]
        out = fn(Fx(ctx), *args)
        out = out if tuple(t.shape) == shape else ctx.reshape(out, tuple(t.shape))
        return ctx.ca.cast(out, ctx.ca.float16) if native else out

    return lower


for _op, _fn in (("igamma", special_incomplete.igamma), ("igammac", special_incomplete.igammac),
                 ("igamma_grad_a", special_incomplete.igamma_grad_a),
                 ("betainc", special_incomplete.betainc)):
    rule(_op)(_looped(_fn))
