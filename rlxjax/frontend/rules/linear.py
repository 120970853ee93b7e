"""Frontend rules: dot_general.

MIL's matmul takes two operands of one dtype (fp16, fp32, int32) and returns that dtype, so
the dtype combinations JAX allows are brought to one first, as XLA's CPU backend computes
them (checked against ``jax.jit`` for every pair of operand dtypes and every
``preferred_element_type``, tests/coreml/test_int8.py):

- in general both operands are converted to the result dtype and multiplied in it: int8 x
  int8 -> int32, float16 x float16 -> float32, int8 x float32 -> float32 (mixed operands);
- operands of one float dtype with a result that is not at least as wide a float (float32
  -> float16, float16 -> int32) are multiplied in their own dtype, and the product
  converted once;
- a bool result is the OR of ANDs: the operands as bool, then the int32 product of 0/1
  (the number of true terms) > 0.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, dtype_from_numpy
from ..registry import rule

_FLOAT_WIDTH = {DType.f16: 16, DType.f32: 32}


def compute_dtype(a: DType, b: DType, out: DType) -> DType:
    """The dtype XLA multiplies operands of dtypes ``a``, ``b`` in for result ``out``."""
    if out == DType.bool:
        return DType.i32
    if a == b and a.is_float and _FLOAT_WIDTH.get(out, 0) < _FLOAT_WIDTH[a]:
        return a
    return out


@rule("dot_general")
def _dot_general(ctx, eqn, a, b):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    out = dtype_from_numpy(eqn.outvars[0].aval.dtype)
    compute = compute_dtype(a.dtype, b.dtype, out)

    def operand(x):
        if out == DType.bool and x.dtype != DType.bool:
            x = ctx.add("convert", x, dtype=DType.bool)
        return x if x.dtype == compute else ctx.add("convert", x, dtype=compute)

    y = ctx.add("dot_general", operand(a), operand(b),
                contract=(tuple(map(int, lc)), tuple(map(int, rc))),
                batch=(tuple(map(int, lb)), tuple(map(int, rb))))
    if out == DType.bool:
        return ctx.add("gt", y, ctx.constant(np.zeros((), np.int32)))
    return y if compute == out else ctx.add("convert", y, dtype=out)
