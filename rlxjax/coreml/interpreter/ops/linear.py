"""matmul and linear (coremltools iOS15/iOS17 linear.py).

fp16 products are accumulated in fp32 and the result rounded to fp16 once (Core ML's fp16
kernels accumulate wider; numpy's own float16 matmul would round after every addition).
"""
from __future__ import annotations

import numpy as np

from .registry import OUTPUT_DTYPES_KEY, register
from .common import acc_dtype, get, out, to_bool


def _check(a, what):
    if a.dtype not in (np.float16, np.float32, np.int32):
        raise TypeError(f"{what} has unsupported dtype {a.dtype}")


@register("matmul", wants_output_dtypes=True)
def matmul(inputs):
    x, y = np.asarray(inputs["x"]), np.asarray(inputs["y"])
    _check(x, "x")
    _check(y, "y")
    if to_bool(get(inputs, "transpose_x", False)):
        if x.ndim < 2:
            raise ValueError("transpose_x=True needs x of rank >= 2")
        x = np.swapaxes(x, -1, -2)
    if to_bool(get(inputs, "transpose_y", False)):
        if y.ndim < 2:
            raise ValueError("transpose_y=True needs y of rank >= 2")
        y = np.swapaxes(y, -1, -2)
    if x.dtype == y.dtype:
        dtype = x.dtype
    else:
        # iOS17 allows mixed dtypes when exactly one operand is const; the output takes the
        # dtype of the non-const one, which only the program's declared output type tells us.
        declared = inputs.get(OUTPUT_DTYPES_KEY)
        if not declared:
            raise TypeError(f"matmul of {x.dtype} and {y.dtype} needs the declared output dtype")
        dtype = declared[0]
    acc = np.promote_types(acc_dtype(x.dtype), acc_dtype(y.dtype))
    # Rank-1 operands behave as in numpy.matmul (prepend / append a unit dim, then drop it).
    return (out(np.matmul(x.astype(acc, copy=False), y.astype(acc, copy=False)), dtype),)


@register("linear")
def linear(inputs):
    x, w = np.asarray(inputs["x"]), np.asarray(inputs["weight"])
    _check(x, "x")
    if w.ndim != 2 or (x.ndim and x.shape[-1] != w.shape[1]):
        raise ValueError(f"linear: x {x.shape} and weight {w.shape} do not match")
    b = inputs.get("bias")
    acc = np.promote_types(acc_dtype(x.dtype), acc_dtype(w.dtype))
    res = np.matmul(x.astype(acc, copy=False), w.astype(acc, copy=False).T)
    if b is not None:
        res = res + np.asarray(b).astype(acc)
    # Output takes x's dtype (iOS17 lets weight/bias have another float dtype).
    return (out(res, x.dtype),)
