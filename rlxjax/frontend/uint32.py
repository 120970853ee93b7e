"""uint32 inside a program: carried as int32 where every value provably fits.

Core ML has no uint32 arithmetic, but JAX's AD emits uint32 *index* arithmetic: the
gradients of ``sort`` and of ``x.at[i].set`` build ``iota(uint32)`` permutations, scatter
and gather them, add 1 and compare. For values in ``[0, 2**31)`` every such operation
gives the same bits on int32 as on uint32, so the frontend carries uint32 values as int32
and proves, equation by equation, that they stay in that range: each uint32 value gets an
interval ``[lo, hi]`` (constants: their min / max; iota: ``[0, n-1]``; then per primitive,
below). An operation whose result might leave the range (a subtraction that could wrap, a
product that could overflow, a conversion from a signed or float value, an unknown
primitive) raises UnsupportedDTypeError naming it: never a silent wrap-around difference.

uint32 program inputs and outputs are refused at the boundary (the caller sees int32
otherwise): cast them to int32 outside / inside the function.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import UnsupportedDTypeError

U32 = np.dtype(np.uint32)
LIMIT = 2 ** 31 - 1  # largest uint32 value that int32 holds

Range = Tuple[int, int]

#: primitives whose uint32 results are some of their uint32 inputs' values (moved,
#: copied, selected) -- result range = union of the inputs' ranges
_MOVES = {
    "reshape", "squeeze", "expand_dims", "transpose", "broadcast_in_dim", "rev",
    "concatenate", "stack", "split", "slice", "dynamic_slice", "dynamic_update_slice",
    "select_n", "copy", "copy_p", "optimization_barrier", "scatter", "reduce_max",
    "reduce_min", "cummax", "cummin", "max", "min", "scatter-max", "scatter_max",
    "scatter-min", "scatter_min", "sort", "top_k", "pad", "stop_gradient", "clamp",
    "device_put",
}


def is_u32(aval) -> bool:
    return np.dtype(aval.dtype) == U32


def _err(ctx, what: str) -> UnsupportedDTypeError:
    where = f" at {ctx.source}" if ctx.source else ""
    return UnsupportedDTypeError(
        f"uint32 {what}{where}: Core ML has no uint32, and rlxjax carries uint32 values as "
        f"int32 only where it can prove them in [0, 2**31) (index arithmetic as in JAX's "
        f"gradients of sort and .at[].set). Use int32 for this computation.")


def constant_range(ctx, arr: np.ndarray) -> Range:
    """A uint32 constant's range; raises if a value does not fit int32."""
    if arr.size == 0:
        return (0, 0)
    lo, hi = int(arr.min()), int(arr.max())
    if hi > LIMIT:
        raise _err(ctx, f"constant with value {hi} >= 2**31")
    return (lo, hi)


class Ranges(dict):
    """value id -> proven ``[lo, hi]`` of a uint32 value carried as int32; its
    ``constant`` is the frontend Builder's constant hook (ir/builder.py)."""

    def constant(self, builder, arr: np.ndarray, make):
        if arr.dtype != U32:
            return make(arr)
        r = constant_range(builder, arr)
        v = make(arr.astype(np.int32))
        self[v.id] = r
        return v


def _union(rs: Sequence[Range]) -> Range:
    return (min(r[0] for r in rs), max(r[1] for r in rs))


def _size(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64))


def _input_range(ctx, eqn, i: int, v) -> Optional[Range]:
    """Range of input i: tracked uint32, bool (0/1), uint8, or a constant integer array."""
    r = ctx.u32_ranges.get(v.id)
    if r is not None:
        return r
    dt = np.dtype(eqn.invars[i].aval.dtype)
    if dt == np.bool_:
        return (0, 1)
    if dt == np.uint8:  # e.g. jnp.sum of uint8, which JAX accumulates in uint32
        return (0, 255)
    from ..ir import constant_value

    c = constant_value(v)
    if c is not None and dt.kind in "iu" and c.size:
        return (int(c.min()), int(c.max()))
    return None


def _transfer(ctx, eqn, inputs, k: int) -> Optional[Range]:
    """Range of output ``k`` of ``eqn``, or None if unknown."""
    name, p = eqn.primitive.name, eqn.params
    if name in ("sort", "top_k"):  # permutations: output k holds input k's values
        return ctx.u32_ranges.get(inputs[min(k, len(inputs) - 1)].id)
    ins = [ctx.u32_ranges.get(v.id) for v in inputs]
    u32_ins = [r for r, var in zip(ins, eqn.invars) if is_u32(var.aval) and r is not None]
    if name in _MOVES:
        if name in ("select_n", "clamp", "dynamic_slice", "dynamic_update_slice", "scatter",
                    "pad", "scatter-max", "scatter_max", "scatter-min",
                    "scatter_min"):
            # only the data operands carry values (not predicates / indices / starts)
            data = {"select_n": inputs[1:], "dynamic_slice": inputs[:1],
                    "dynamic_update_slice": inputs[:2], "scatter": [inputs[0], inputs[2]],
                    "scatter-max": [inputs[0], inputs[2]], "scatter_max": [inputs[0], inputs[2]],
                    "scatter-min": [inputs[0], inputs[2]], "scatter_min": [inputs[0], inputs[2]],
                    }.get(name, inputs)
            rs = [ctx.u32_ranges.get(v.id) for v in data]
            return None if any(r is None for r in rs) else _union(rs)
        if len(u32_ins) != sum(is_u32(v.aval) for v in eqn.invars) or not u32_ins:
            return None
        return _union(u32_ins)
    if name == "gather":
        r = ins[0]
        if r is None:
            return None
        from jax import lax

        if p["mode"] == lax.GatherScatterMode.FILL_OR_DROP:
            fill = p["fill_value"]
            fill = int(np.iinfo(U32).max) if fill is None else int(fill)
            r = _union([r, (fill, fill)])
        return r
    if name == "convert_element_type":
        return _input_range(ctx, eqn, 0, inputs[0])
    if name == "iota":
        n = int(p["shape"][int(p["dimension"])])
        return (0, max(n - 1, 0))
    if name in ("argmax", "argmin"):
        n = int(eqn.invars[0].aval.shape[int(p["axes"][0])])
        return (0, max(n - 1, 0))
    if name in ("scatter-add", "scatter_add"):  # operand + every update (indices aside)
        r0, r2 = _input_range(ctx, eqn, 0, inputs[0]), _input_range(ctx, eqn, 2, inputs[2])
        if r0 is None or r2 is None:
            return None
        n = _size(eqn.invars[2].aval)
        return (r0[0], r0[1] + n * r2[1])
    rs = [_input_range(ctx, eqn, i, v) for i, v in enumerate(inputs)]
    if any(r is None for r in rs):
        return None
    if name in ("add", "add_any"):
        return (rs[0][0] + rs[1][0], rs[0][1] + rs[1][1])
    if name == "sub":
        return (rs[0][0] - rs[1][1], rs[0][1] - rs[1][0])  # lo < 0: might wrap
    if name == "mul":
        return (rs[0][0] * rs[1][0], rs[0][1] * rs[1][1])
    if name in ("div", "rem"):
        if rs[1][0] <= 0:
            return None  # division by zero is not the same in uint32 and int32
        if name == "div":
            return (rs[0][0] // rs[1][1], rs[0][1] // rs[1][0])
        return (0, min(rs[0][1], rs[1][1] - 1))
    if name in ("reduce_sum", "cumsum"):
        n = max(_size(eqn.invars[0].aval), 1)
        return (min(rs[0][0], rs[0][0] * n), rs[0][1] * n)
    return None


def track(ctx, eqn, inputs, outs) -> None:
    """Give every uint32 result of ``eqn`` a proven range, or raise."""
    for k, (var, v) in enumerate(zip(eqn.outvars, outs)):
        if not is_u32(var.aval) or v.id in ctx.u32_ranges:
            continue  # already proven (a constant, an inlined call's result, an input)
        r = _transfer(ctx, eqn, inputs, k)
        if r is None:
            raise _err(ctx, f"result of '{eqn.primitive.name}' whose range rlxjax cannot bound")
        if r[0] < 0 or r[1] > LIMIT:
            raise _err(ctx, f"result of '{eqn.primitive.name}' that may lie outside "
                       f"[0, 2**31) (bounds [{r[0]}, {r[1]}])")
        ctx.u32_ranges[v.id] = r
