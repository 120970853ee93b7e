"""Frontend rules: cumulative reductions (cumsum natively; the others as JAX's own
associative scan)."""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

from .... import _jax_compat as jc
from ....ir import DType
from ...registry import rule
from ..bitwise import NARROW, wrap


@rule("cumsum")
def _cumsum(ctx, eqn, x):
    narrow = x.dtype in NARROW  # int8 / uint8: summed in int32, wrapped back (exact)
    if x.dtype not in (DType.f32, DType.f16, DType.i32) and not narrow:
        raise ctx.unsupported(f"cumsum of {x.dtype} (Core ML's cumsum takes fp16/fp32/int32)")
    v = ctx.add("convert", x, dtype=DType.i32) if narrow else x
    y = ctx.add("cumsum", v, axis=int(eqn.params["axis"]), reverse=bool(eqn.params["reverse"]))
    return wrap(ctx, y, x.dtype) if narrow else y


def _combine(name, narrow=False):
    if narrow and name == "cumprod":  # 8-bit values in int32: products kept in (-256, 256)
        return lambda a, b: lax.rem(lax.mul(a, b), np.int32(256))
    return {"cumprod": lax.mul, "cummax": lax.max, "cummin": lax.min,
            "cumlogsumexp": jc.logaddexp()}[name]


def _interleave(a, b, axis):
    """JAX's loops._interleave: a at even, b at odd positions (pad + add)."""
    a_pad, b_pad = [(0, 0, 0)] * a.ndim, [(0, 0, 0)] * b.ndim
    same = a.shape[axis] == b.shape[axis]
    a_pad[axis] = (0, 1 if same else 0, 1)
    b_pad[axis] = (1, 0 if same else 1, 1)
    op = lax.bitwise_or if a.dtype == np.bool_ else lax.add
    return op(lax.pad(a, np.zeros((), a.dtype), a_pad), lax.pad(b, np.zeros((), b.dtype), b_pad))


def _prefix_scan(fn, x, axis):
    """lax.associative_scan(fn, x, axis=axis) for one array, step for step, except that the
    combine of two empty slices (length 2) is skipped: zero-size tensors are not something
    to put in a Core ML program, and the skipped op contributes nothing, to values or
    gradients."""
    n = x.shape[axis]
    if n < 2:
        return x
    sl = lax.slice_in_dim
    odd = _prefix_scan(fn, fn(sl(x, 0, n - 1, 2, axis), sl(x, 1, n, 2, axis)), axis)
    if n % 2 == 0:
        m = odd.shape[axis]
        even = fn(sl(odd, 0, m - 1, 1, axis), sl(x, 2, n, 2, axis)) if m > 1 else None
    else:
        even = fn(odd, sl(x, 2, n, 2, axis))
    head = sl(x, 0, 1, 1, axis)
    even = head if even is None else lax.concatenate([head, even], axis)
    return _interleave(even, odd, axis)


@rule("cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(ctx, eqn, x):
    """MIL has no cumprod/cummax/...: inline JAX's own parallel prefix scan
    (lax.associative_scan, replicated by _prefix_scan), which is also what JAX
    differentiates for these primitives, so gradients (ties included) follow JAX's."""
    name, p = eqn.primitive.name, eqn.params
    axis, reverse = int(p["axis"]), bool(p["reverse"])
    narrow = x.dtype in NARROW  # int8 / uint8: scanned in int32 (Core ML's arithmetic)
    v = ctx.add("convert", x, dtype=DType.i32) if narrow else x

    def scan(v):
        v = lax.rev(v, (axis,)) if reverse else v
        out = _prefix_scan(_combine(name, narrow), v, axis)
        return lax.rev(out, (axis,)) if reverse else out

    closed = jax.make_jaxpr(scan)(jax.ShapeDtypeStruct(tuple(v.shape), v.dtype.np))
    (out,) = ctx.eval_jaxpr(closed.jaxpr, closed.consts, [v])
    if not narrow:
        return out
    return wrap(ctx, out, x.dtype) if name == "cumprod" else ctx.add("convert", out,
                                                                     dtype=x.dtype)
