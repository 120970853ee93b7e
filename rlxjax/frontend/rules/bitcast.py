"""Frontend rule: bitcast_convert_type, where Core ML can compute it exactly.

MIL has no bit reinterpretation. Three cases are exact without one: the same dtype (the
identity; JAX's derivative of a bitcast is zero, so no gradient flows through it),
int8 <-> uint8, which reinterprets two's complement: the value modulo 2**8, i.e. a
``convert``, and the **sign bit** of a float32: ``jnp.signbit(x)`` is
``shift_right_arithmetic(bitcast(x, int32), 31)`` (Keras' ``ops.argmax`` guards against
flush-to-zero with it). When every reader of the float32 -> int32 bitcast is such a shift by
31 or a comparison with 0 (which see only the sign bit), the bits are replaced by -1 / 0
from the sign: ``x < 0``, or ``x == 0`` with ``1 / x < 0`` for -0. A NaN's sign is
invisible to Core ML (every NaN is read as +NaN): the arguments whose values reach such a
bitcast are checked on each call, as for ``top_k`` (frontend/nan_sign.py). Anything else
(float <-> int bits, widths that change the shape) is refused.
"""
from __future__ import annotations

import numpy as np

from ... import _jax_compat as jc
from ...ir import DType
from ..registry import rule

_SMALL = (DType.i8, DType.u8)
#: comparisons with a literal 0 on the right see only the sign of an int32
_SIGN_COMPARES = ("lt", "ge")


def _literal(atom, value) -> bool:
    return isinstance(atom, jc.Literal) and np.ndim(atom.val) == 0 and int(atom.val) == value


def reads_sign_only(eqn, var) -> bool:
    """Whether ``eqn`` reads only the sign bit of the int32 ``var`` (its first operand)."""
    if eqn is None or len(eqn.invars) != 2 or eqn.invars[0] is not var:
        return False
    name, amount = eqn.primitive.name, eqn.invars[1]
    if name == "shift_right_arithmetic":
        return _literal(amount, 31)
    return name in _SIGN_COMPARES and _literal(amount, 0)


def sign_only(readers, eqn) -> bool:
    """Whether the float32 -> int32 bitcast ``eqn``'s result is read for its sign only."""
    if readers is None:
        return False
    out = eqn.outvars[0]
    return all(reads_sign_only(r, out) for r in readers.get(out, [None]))


def _sign_bits(ctx, x):
    """-1 where x's sign bit is set (x < 0, or -0), else 0; NaN counts as +NaN."""
    zero = ctx.scalar(0.0, x)
    neg = ctx.add("lt", x, zero)
    neg_zero = ctx.add("and", ctx.add("eq", x, zero),
                       ctx.add("lt", ctx.add("div", ctx.scalar(1.0, x), x), zero))
    sign = ctx.add("or", neg, neg_zero)
    i32 = lambda v: ctx.constant(np.asarray(v, np.int32))  # noqa: E731
    return ctx.add("select", sign, i32(0), i32(-1))  # select(pred, on_false, on_true)


@rule("bitcast_convert_type")
def _bitcast_convert_type(ctx, eqn, x):
    new = np.dtype(eqn.params["new_dtype"])
    old = np.dtype(eqn.invars[0].aval.dtype)
    if new == old:
        return ctx.add("stop_gradient", x) if x.dtype.is_float else x
    if x.dtype in _SMALL and new in (np.dtype(np.int8), np.dtype(np.uint8)):
        return ctx.add("convert", x, dtype=DType.i8 if new == np.int8 else DType.u8)
    if old == np.float32 and new == np.int32 and sign_only(ctx.readers, eqn):
        return _sign_bits(ctx, x)
    raise ctx.unsupported(
        f"bitcast from {old.name} to {new.name}: Core ML has no bit reinterpretation (rlxjax "
        "computes only same-dtype and int8 <-> uint8 bitcasts, which need none, and the "
        "sign bit of a float32 as jnp.signbit reads it)")
