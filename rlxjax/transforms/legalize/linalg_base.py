"""The building blocks of the linalg decompositions (linalg*.py of this package): each
factorization is a loop over the columns (or rows) of the matrix, so a program has the
same few ops whatever the size.

Every step is vectorised over the rows, the batch and the right-hand sides: step ``j``
reads row / column ``j`` with ``take_at`` at the loop's counter (ir/indexing.py: Core ML
slices at a runtime offset, Core AI sums a one-hot ``where``: exact either way) and
writes its result with a ``select`` on ``iota == j`` (exact: no arithmetic touches the
other entries, and a NaN or inf elsewhere cannot leak through a multiplication by a
one-hot zero). Entries not computed yet are zero, so a matrix product over them sums
exactly the terms of the textbook loop (the others are exact zeros). A step costs O(n·k)
(a matrix-vector product), the whole factorization O(n³) as in LAPACK.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir import DType, Graph, TensorType
from ...ir.builder import Builder

I32 = TensorType((), DType.i32)


class E:
    """A builder of elementwise ops whose Python / numpy operands become constants (a
    Python number takes the dtype of the op's first RLX operand): ``e("add", x, 1.0)``."""

    def __init__(self, b: Builder):
        self.b = b

    def lift(self, x, like=None):
        if isinstance(x, np.ndarray):
            return self.b.constant(x)
        if isinstance(x, (int, float, bool, np.generic)):
            if like is not None:
                return self.b.constant(np.asarray(x, like.dtype.np))
            if isinstance(x, int) and not isinstance(x, bool):
                return self.b.constant(np.int32(x))
            return self.b.constant(np.asarray(x))
        return x

    def __call__(self, op: str, *xs, **params):
        like = next((x for x in xs if hasattr(x, "type")), None)
        return self.b.add(op, *[self.lift(x, like) for x in xs], **params)

    def sel(self, cond, on_true, on_false):
        """``on_true`` where ``cond`` holds, else ``on_false`` (numpy broadcasting)."""
        like = next((x for x in (on_true, on_false) if hasattr(x, "type")), None)
        return self.b.add("select", self.lift(cond), self.lift(on_false, like),
                          self.lift(on_true, like))

    def take(self, x, axis: int, i):
        """Entry ``i`` (an i32 scalar, or one per batch element) of ``x`` along ``axis``
        (negative), the axis kept."""
        if not hasattr(i, "type"):
            i = self.b.constant(np.int32(i))
        return self.b.add("take_at", x, i, axis=x.type.rank + axis)

    def sum_keep(self, x, axis: int):
        """The sum along ``axis`` (negative), the axis kept (size 1)."""
        return self.reduce_keep("reduce_sum", x, axis)

    def reduce_keep(self, op: str, x, axis: int):
        """``op`` (a reduction, or argmax / argmin) along ``axis`` (negative), the axis
        kept (the op's ``keep_dims``: no reshape back)."""
        ax = x.type.rank + axis
        if op in ("argmax", "argmin"):
            return self.b.add(op, x, axis=ax, index_dtype=DType.i32, keep_dims=True)
        return self.b.add(op, x, axes=(ax,), keep_dims=True)

    def mm(self, x, y, transpose_y: bool = False, transpose_x: bool = False):
        """The matrix product over the trailing two dims (the leading ones a batch); with
        ``transpose_x`` / ``transpose_y``, ``xᵀ`` / ``yᵀ`` in it."""
        r = x.type.rank
        batch = tuple(range(r - 2))
        cx = r - 2 if transpose_x else r - 1
        if y.type.rank == 2 and r > 2:  # one matrix for the whole batch
            return self.b.add("dot_general", x, y, contract=((cx,), (1 if transpose_y else 0,)),
                              batch=((), ()))
        return self.b.add("dot_general", x, y,
                          contract=((cx,), (r - 1 if transpose_y else r - 2,)),
                          batch=(batch, batch))

    def swap_last(self, x):
        r = x.type.rank
        return self.b.transpose(x, tuple(range(r - 2)) + (r - 1, r - 2))

    def zeros(self, t: TensorType):
        return self.b.constant(np.zeros(tuple(t.shape), t.dtype.np))


def iota(n: int, axis: int, rank: int = 2) -> np.ndarray:
    """0..n-1 as an int32 array along ``axis`` (negative) of rank ``rank``, 1 elsewhere."""
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n, dtype=np.int32).reshape(shape)


def loop(b: Builder, n: int, consts: Sequence, init: Sequence, body: Callable,
         cond: Callable = None) -> list:
    """``for j in range(n): carry = body(e, j, consts, *carry)`` as an RLX ``while`` (its
    ``trip_count`` n) -> the final carry. Regions are closed: ``consts`` are the outer
    values the body reads (it gets them as its own). ``cond(e, carry) -> bool[]``, when
    given, is and-ed to ``j < n`` (a loop that may end early)."""
    types = [I32] + [v.type for v in init]
    cg = Graph("cond")
    cin = [cg.add_input(f"c{k}", t) for k, t in enumerate(types)]
    ec = E(Builder(cg, b.source))
    more = ec("lt", cin[0], n)
    if cond is not None:
        more = ec("and", more, cond(ec, cin[1:]))
    cg.add_output("more", more)
    bg = Graph("body")
    kin = [bg.add_input(f"k{k}", v.type) for k, v in enumerate(consts)]
    bin_ = [bg.add_input(f"c{k}", t) for k, t in enumerate(types)]
    eb = E(Builder(bg, b.source))
    outs = [eb("add", bin_[0], 1)] + list(body(eb, bin_[0], kin, *bin_[1:]))
    for k, (v, t) in enumerate(zip(outs, types)):
        if v.type != t:
            raise AssertionError(f"internal: a linalg loop carries {t}, its body gives {v.type}")
        bg.add_output(f"o{k}", v)
    node = b.graph.add_node("while", list(consts) + [b.constant(np.int32(0))] + list(init),
                            {"n_cond_consts": 0, "n_body_consts": len(consts),
                             "trip_count": n}, b.source, {"cond": cg, "body": bg})
    return list(node.outputs[1:])
