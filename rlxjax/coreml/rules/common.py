"""Helpers shared by the Core ML lowering rules. Each takes the MIL builder ``b`` (or
only a value) and emits a small, exact MIL pattern; no lowering is registered here.
:class:`Ew` is the shorthand every rule family uses for elementwise MIL ops;
:func:`graphs` is what a rule's whole-graph analysis (``ctx.analysis``) walks.

Two paddings, for two contracts:

- :func:`pad_edges`: MIL ``pad`` semantics, non-negative ``(lo, hi)`` per axis with a
  constant (non-float dtypes, which MIL's pad rejects, get constant blocks concatenated);
- :func:`lax_pad`: ``lax.pad`` semantics, ``(lo, hi, interior)`` per axis where a negative
  edge crops, built from :func:`pad_edges`, reshapes and slices.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType, broadcast_shapes
from ..builder import FILL_CONST_MAX


def graphs(root):
    """``root`` and every region graph nested in it, at any depth: what a rule's analysis
    of the graph being lowered (``LowerContext.analysis``) reads."""
    stack = [root]
    while stack:
        g = stack.pop()
        yield g
        for n in g.nodes:
            if n.regions:  # a graph, or a tuple of them (cond's branches)
                stack.extend(n.subgraphs())


def scalar_like(x, value) -> np.ndarray:
    """``value`` as a rank-0 constant of ``x``'s dtype (MIL broadcasts it)."""
    return np.asarray(value, dtype=x.dtype.np)


def reshape(b, x, shape):
    """``x`` reshaped to ``shape`` (``x`` itself when it already has that shape)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    known = b.known(x)
    if known is not None:  # a constant stays one (folding ran before lowering)
        return b.const(np.reshape(known, shape))
    return b.op("reshape", TensorType(shape, x.dtype), x=x, shape=np.asarray(shape, np.int32))


def transpose(b, x, perm):
    """``x`` with its axes permuted by ``perm`` (``x`` itself for the identity)."""
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    known = b.known(x)
    if known is not None:
        return b.const(np.ascontiguousarray(np.transpose(known, perm)))
    return b.op("transpose", TensorType(tuple(x.shape[i] for i in perm), x.dtype), x=x,
                perm=np.asarray(perm, np.int32))


def _shape(v):
    return tuple(v.shape) if hasattr(v, "shape") else ()


def _first_var_dtype(*vs):
    return next(v.dtype for v in vs if not isinstance(v, np.ndarray))


class Ew:
    """Shorthand for elementwise MIL ops; output shapes follow numpy broadcasting."""

    def __init__(self, b):
        self.b = b

    def unary(self, op, x, **kw):
        return self.b.op(op, TensorType(x.shape, x.dtype), x=x, **kw)

    def binary(self, op, x, y, dtype=None):
        t = TensorType(broadcast_shapes(_shape(x), _shape(y)), dtype or _first_var_dtype(x, y))
        return self.b.op(op, t, x=x, y=y)

    def compare(self, op, x, y):
        return self.binary(op, x, y, DType.bool)

    def select(self, cond, a, b):
        t = TensorType(broadcast_shapes(_shape(cond), _shape(a), _shape(b)),
                       _first_var_dtype(a, b))
        return select(self.b, t, cond, a, b)


def select(b, t, cond, x, y):
    """MIL select. coremltools infers the result's shape from the two branches alone, so
    when only ``cond`` carries the full shape, the first branch is tiled to it first."""
    if broadcast_shapes(_shape(x), _shape(y)) != tuple(t.shape):
        xv = b.const(x) if isinstance(x, np.ndarray) else x
        full = (1,) * (t.rank - xv.type.rank) + tuple(xv.shape)
        reps = [d // s for d, s in zip(t.shape, full)]
        known = b.known(xv)
        if known is not None and t.size <= max(FILL_CONST_MAX, known.size):
            x = b.const(np.tile(np.reshape(known, full), reps))  # a small constant
        else:
            x = b.op("tile", t, x=reshape(b, xv, full), reps=np.asarray(reps, np.int32))
    return b.op("select", t, cond=cond, a=x, b=y)


def slice_axis(b, x, axis, start, stop):
    """``x[..., start:stop, ...]`` along ``axis``."""
    begin = [0] * x.type.rank
    end = list(x.shape)
    begin[axis], end[axis] = start, stop
    shape = list(x.shape)
    shape[axis] = stop - start
    return b.op("slice_by_index", TensorType(tuple(shape), x.dtype), x=x,
                begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                stride=np.ones(x.type.rank, np.int32))


def pad_edges(b, x, pads, value):
    """MIL pad (constant mode) with non-negative (lo, hi) per axis. MIL's pad takes
    float tensors only; other dtypes get constant blocks concatenated on each side."""
    if all(lo == 0 and hi == 0 for lo, hi in pads):
        return x
    shape = tuple(d if lo == hi == 0 else d + lo + hi  # (an unpadded axis may be flexible)
                  for d, (lo, hi) in zip(x.shape, pads))
    if not x.dtype.is_float:
        for axis, (lo, hi) in enumerate(pads):
            parts = []
            for n in (lo, hi):
                block = list(x.shape)
                block[axis] = n
                parts.append(np.full(block, value, x.dtype.np) if n else None)
            pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
            if len(pieces) > 1:
                out = list(x.shape)
                out[axis] += lo + hi
                x = b.op("concat", TensorType(tuple(out), x.dtype),
                         values=[b.const(p) if isinstance(p, np.ndarray) else p for p in pieces],
                         axis=np.int32(axis), interleave=False)
        return x
    return b.op("pad", TensorType(shape, x.dtype), x=x,
                pad=np.asarray([v for lh in pads for v in lh], np.int32), mode="constant",
                constant_val=np.asarray(value, x.dtype.np))


def lax_pad(b, x, config, value):
    """``lax.pad(x, value, config)`` for a constant ``value``: ``config`` holds
    ``(lo, hi, interior)`` per axis; negative ``lo`` / ``hi`` crop."""
    for axis, (_, _, k) in enumerate(config):
        if k == 0 or x.shape[axis] <= 1:
            continue
        # Interior padding: [.., d, ..] -> [.., d, 1, ..] -> pad to [.., d, k+1, ..]
        # -> [.., d*(k+1), ..] -> drop the k trailing fill values.
        d = x.shape[axis]
        split = x.shape[:axis + 1] + (1,) + x.shape[axis + 1:]
        y = reshape(b, x, split)
        pads = [(0, 0)] * len(split)
        pads[axis + 1] = (0, k)
        y = pad_edges(b, y, pads, value)
        y = reshape(b, y, x.shape[:axis] + (d * (k + 1),) + x.shape[axis + 1:])
        x = slice_axis(b, y, axis, 0, d + (d - 1) * k)
    cfg = config
    x = pad_edges(b, x, [(max(lo, 0), max(hi, 0)) for lo, hi, _ in cfg], value)
    for axis, (lo, hi, _) in enumerate(cfg):
        if lo < 0 or hi < 0:
            x = slice_axis(b, x, axis, max(-lo, 0), x.shape[axis] - max(-hi, 0))
    return x


def bool_as_int32(b, x):
    """``x``, with a bool ``x`` cast to int32: MIL's gathers, scatters and fills take
    fp16/fp32/int32, so bools travel as int32 (undo with :func:`restore_bool`)."""
    if x.dtype != DType.bool:
        return x
    return b.op("cast", x.type.with_dtype(DType.i32), x=x, dtype="int32")


def restore_bool(b, y, dtype):
    """``y`` cast back to bool when the value it carries is a bool (``dtype``), after
    :func:`bool_as_int32`; else ``y`` itself."""
    if dtype != DType.bool:
        return y
    return b.op("cast", y.type.with_dtype(DType.bool), x=y, dtype="bool")
