"""Frontend rules: conv_general_dilated, as a canonical RLX ``conv`` between transposes.

JAX's ``dimension_numbers`` say where batch/feature/spatial dims sit in each operand
(lhs_spec = (batch, feature, *spatial), rhs_spec = (out feature, in feature, *spatial),
out_spec = (batch, feature, *spatial), each a tuple of dim indices). Transposing the
operands by their spec gives the canonical [N, C, *S] / [O, I, *K] layout of RLX ``conv``;
the result is transposed back by the inverse of out_spec.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, dtype_from_numpy
from ..registry import rule
from .linear import compute_dtype

MAX_SPATIAL = 3  # MIL conv takes 1 to 3 spatial dims


@rule("conv_general_dilated")
def _conv_general_dilated(ctx, eqn, lhs, rhs):
    p = eqn.params
    out = dtype_from_numpy(eqn.outvars[0].aval.dtype)
    if out == DType.bool:
        raise ctx.unsupported("a bool convolution: convert the operands to int32")
    # operand / result dtypes as for dot_general (rules/linear.py); integer convolutions
    # are lowered exactly (coreml/rules/conv_int.py)
    compute = compute_dtype(lhs.dtype, rhs.dtype, out)
    lhs, rhs = (v if v.dtype == compute else ctx.add("convert", v, dtype=compute)
                for v in (lhs, rhs))
    n_spatial = lhs.type.rank - 2
    if not 1 <= n_spatial <= MAX_SPATIAL:
        raise ctx.unsupported(f"{n_spatial} spatial dimensions (Core ML's conv takes 1 to "
                              f"{MAX_SPATIAL}); reshape to add or merge spatial dims")
    if any(d == 0 for d in tuple(lhs.shape) + tuple(rhs.shape)):
        raise ctx.unsupported(f"an empty operand ({lhs.type}, {rhs.type})")
    lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
    x = ctx.transpose(lhs, lhs_spec)
    w = ctx.transpose(rhs, rhs_spec)
    y = ctx.add("conv", x, w,
                strides=tuple(int(s) for s in p["window_strides"]),
                padding=tuple((int(lo), int(hi)) for lo, hi in p["padding"]),
                lhs_dilation=tuple(int(d) for d in p["lhs_dilation"]),
                rhs_dilation=tuple(int(d) for d in p["rhs_dilation"]),
                feature_groups=int(p["feature_group_count"]),
                batch_groups=int(p["batch_group_count"]))
    if any(d == 0 for d in y.shape):
        raise ctx.unsupported(f"a convolution with an empty result {y.type}")
    y = ctx.transpose(y, np.argsort(out_spec))
    return y if compute == out else ctx.add("convert", y, dtype=out)
