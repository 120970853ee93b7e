"""int8 / uint8 values inside a Core ML program: carried as int32, wrapped like JAX.

MIL's arithmetic, comparisons, reductions, matmul, gathers and scatters take fp16, fp32 and
int32 only, on every target; int8 / uint8 tensors exist from iOS17, but only for ``cast``
and data movement. So the lowering carries every i8 / u8 RLX value as an int32 MIL value
holding the same number (``LowerContext.dt``), and

- after an op that may leave the 8-bit range (``add``, ``mul``, ``neg``, ``abs``, ``div``,
  ``integer_pow``, sums, ``dot_general``, ``conv``, ...: everything not in
  `PRESERVING`, rlxjax/ir/smallint.py), reduces the int32 result into its range mod 2**8
  (:func:`wrap`). That is exactly JAX's wrap-around, because the int32 result is the exact
  integer result of the op on the operands' values: a sum, difference, product or
  quotient of two 8-bit values fits int32 (-128 / -1 = 128 wraps to -128, as XLA gives),
  ``integer_pow`` wraps after every product, sums (reductions, cumsum, scatter-add) fit
  for fewer than 2**23 terms and sums of products (dot_general, conv) for fewer than 2**15
  terms per output, and the frontend computes 8-bit products of many values (reduce_prod,
  cumprod) with a wrap per step. Nothing relies on how Core ML wraps an int32 overflow --
  except a scatter-mul of int8 / uint8 with five or more updates to one position, whose
  int32 product may overflow (the reference backend wraps it modulo 2**32, which still
  gives JAX's result);
- an op that only moves, selects or orders its operands' values, or whose result is in
  range by construction (``reshape``, ``gather_nd``, ``select``, ``max``, ``sign``, ``rem``,
  ``convert``, which wraps itself, ...) keeps its int32 result as it is;
- at the program boundary the values travel as int32 multi-arrays, converted exactly by
  the host (``IOSpec``); from iOS26 int8 travels as int8 (``targets.INT8_IO``), cast to and
  from int32 at the boundary. uint8 stays int32 on every target: Core ML's model
  interface has no uint8 multi-array.

The bit operations, whose 8-bit results depend on the bit pattern rather than the value
(a logical shift, a population count), take int32 operands only: the frontend converts
8-bit values to their pattern first (frontend/rules/bitwise.py).
"""
from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..ir.smallint import SMALL, carried, needs_wrap  # noqa: F401 (the lowering's)


def wrap(b, x, dtype: DType):
    """The int32 MIL value ``x`` reduced modulo 2**8 into ``dtype``'s range: [0, 255] for
    u8, [-128, 127] for i8 (MIL ``mod`` is the floor modulo: its result has the divisor's
    sign)."""
    t = TensorType(x.shape, DType.i32)
    if dtype == DType.u8:
        return b.op("mod", t, x=x, y=np.int32(256))
    shifted = b.op("add", t, x=x, y=np.int32(128))
    return b.op("sub", t, x=b.op("mod", t, x=shifted, y=np.int32(256)), y=np.int32(128))


def in_range(b, x, src: DType, dst: DType):
    """An int32-carried integer value of RLX dtype ``src`` as dtype ``dst`` (JAX's integer
    conversion: the low bits, i.e. the value modulo 2**8 for an 8-bit ``dst``)."""
    if dst not in SMALL or src == dst:
        return x
    return wrap(b, x, dst)
