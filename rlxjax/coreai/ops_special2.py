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


def _in_fp32(fn, f16: bool, loops: bool = False):
    """A lowering computing ``fn`` on ``Fx`` in fp32, its operands at the result's shape
    (Core AI's where misbehaved on operands that broadcast along different dims:
    ops_base.py ``Ctx.widen``). ``f16``: fp16 values too, as XLA computes them, in fp32
    rounded once (a carried fp16 value is rounded by Ctx.lower_nodes; a native one,
    precision fp16, is cast). ``loops``: the operands at least 1-D (the while loops of
    ir/special_incomplete.py run on rank 0 as [1])."""
    def lower(ctx, node, ins):
        t = node.outputs[0].type
        if t.dtype != DType.f32 and not (f16 and t.dtype == DType.f16):
            raise unsupported(node, f"{node.op} of {t.dtype} is not lowered for Core AI yet")
        native = t.dtype == DType.f16 and ctx.native_f16
        if native:
            ins = [ctx.ca.cast(v, ctx.ca.float32) for v in ins]
        shape = tuple(t.shape) or ((1,) if loops else ())
        if loops:
            ins = [v if ctx.shape(v) else ctx.reshape(v, (1,) * len(shape)) for v in ins]
        out = fn(Fx(ctx), *[ctx.widen(v, shape, DType.f32) for v in ins])
        out = out if tuple(t.shape) == shape else ctx.reshape(out, tuple(t.shape))
        return ctx.ca.cast(out, ctx.ca.float16) if native else out

    return lower


# fp16: jax.jit gives exactly round(f(fp32(x))) for these on every finite fp16 (measured,
# 2026-12-02), but not for nextafter, which steps by one fp16 ulp: its fp16 stays refused
for _op, _fn, _f16 in (
        ("atan2", special_eval.atan2, True), ("cbrt", special_eval.cbrt, True),
        ("nextafter", special_eval.nextafter, False), ("erf_inv", special_eval.erf_inv, True),
        ("bessel_i0e", special_eval.i0e, True), ("bessel_i1e", special_eval.i1e, True),
        ("lgamma", special_eval.lgamma, True), ("digamma", special_eval.digamma, True),
        ("zeta", special_eval.zeta, False), ("polygamma", special_eval.polygamma, False)):
    rule(_op)(_in_fp32(_fn, _f16))


for _op, _fn in (("igamma", special_incomplete.igamma), ("igammac", special_incomplete.igammac),
                 ("igamma_grad_a", special_incomplete.igamma_grad_a),
                 ("betainc", special_incomplete.betainc)):
    rule(_op)(_in_fp32(_fn, True, loops=True))
