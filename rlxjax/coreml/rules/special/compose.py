"""Building blocks for the special-function lowerings (the other modules of special/):
float arithmetic on MIL vars that reads like the formula, exact helpers (log1p, the sign of
a zero), and a ``while_loop`` over elementwise state. No lowering is registered here.

``Fx(b, dtype)`` emits elementwise MIL ops in ``dtype``; every operand may be a var or a
Python / numpy number (a rank-0 constant of ``dtype``). ``upcast(...)`` evaluates a
composition in fp32 when the program computes in fp16: the special functions' polynomial
and series evaluations (Lanczos sums with terms of 1e3 that cancel, continued fractions)
have no accuracy left in fp16's 11 bits; XLA computes them in fp32 for f16 operands too.
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

from ....ir import DType, TensorType
from ....ir.special_eval import FxCommon
from ..common import Ew


class Fx(FxCommon):
    """Elementwise float arithmetic in one dtype (see the module docstring)."""

    def __init__(self, b, dtype: DType):
        self.b, self.e, self.dt = b, Ew(b), dtype

    def c(self, v) -> np.ndarray:
        return np.asarray(v, dtype=self.dt.np)

    def _v(self, x):
        return self.c(x) if isinstance(x, (int, float, np.floating, np.integer)) else x

    def _pair(self, x, y):
        x, y = self._v(x), self._v(y)
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            x = self.b.const(x)
        return x, y

    # -- arithmetic ----------------------------------------------------------------------
    def add(self, x, y):
        return self.e.binary("add", *self._pair(x, y))

    def sub(self, x, y):
        return self.e.binary("sub", *self._pair(x, y))

    def mul(self, x, y):
        return self.e.binary("mul", *self._pair(x, y))

    def div(self, x, y):
        return self.e.binary("real_div", *self._pair(x, y))

    def pow(self, x, y):
        return self.e.binary("pow", *self._pair(x, y))

    def max(self, x, y):
        return self.e.binary("maximum", *self._pair(x, y))

    def min(self, x, y):
        return self.e.binary("minimum", *self._pair(x, y))

    def neg(self, x):
        return self.e.binary("mul", x, self.c(-1))

    def abs(self, x):
        return self.e.unary("abs", x)

    def floor(self, x):
        return self.e.unary("floor", x)

    def sqrt(self, x):
        return self.e.unary("sqrt", x)

    def exp(self, x):
        return self.e.unary("exp", x)

    def log(self, x):
        return self.b.op("log", x.type, x=x, epsilon=self.c(0))

    def sin(self, x):
        return self.e.unary("sin", x)

    def cos(self, x):
        return self.e.unary("cos", x)

    def tan(self, x):
        return self.e.unary("tan", x)

    def atan(self, x):
        return self.e.unary("atan", x)

    def square(self, x):
        return self.mul(x, x)

    # -- comparisons and logic -----------------------------------------------------------
    def lt(self, x, y):
        return self.e.compare("less", *self._pair(x, y))

    def le(self, x, y):
        return self.e.compare("less_equal", *self._pair(x, y))

    def gt(self, x, y):
        return self.e.compare("greater", *self._pair(x, y))

    def ge(self, x, y):
        return self.e.compare("greater_equal", *self._pair(x, y))

    def eq(self, x, y):
        return self.e.compare("equal", *self._pair(x, y))

    def ne(self, x, y):
        return self.e.compare("not_equal", *self._pair(x, y))

    def and_(self, p, q):
        return self.e.binary("logical_and", p, q, DType.bool)

    def or_(self, p, q):
        return self.e.binary("logical_or", p, q, DType.bool)

    def not_(self, p):
        return self.b.op("logical_not", p.type, x=p)

    def isnan(self, x):
        return self.ne(x, x)

    def isinf(self, x):
        return self.eq(self.abs(x), np.inf)

    def select(self, cond, on_true, on_false):
        a, b = self._v(on_true), self._v(on_false)
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            a = self.b.const(np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)).copy())
        return self.e.select(cond, a, b)

    # -- exact helpers -------------------------------------------------------------------
    def log1p(self, x):
        """log(1 + x) to a few ulps for every x (Goldberg: log(u)·x/(u − 1), u = 1 + x)."""
        u = self.add(x, 1)
        d = self.sub(u, 1)
        general = self.mul(self.log(u), self.div(x, d))
        out = self.select(self.eq(d, 0), x, general)
        return self.select(self.eq(u, np.inf), u, out)

    def full_like(self, x, value):
        """``value`` broadcast to ``x``'s shape (a var)."""
        return self.b.full(TensorType(tuple(x.shape), self.dt), value)

    # -- loops (ir/special_incomplete.py) -------------------------------------------------
    def scalar(self, value):
        """A rank-0 constant var."""
        return self.b.const(self.dt.np.type(value))

    def mask(self, p):
        """The bool ``p`` as 0/1 floats."""
        return self.cast(p, DType.f32)

    def max_all(self, x):
        return max_of(self, x)

    def any_true(self, mask):
        return any_true(self, mask)

    def while_loop(self, init, cond, body):
        return while_loop(self.b, init, cond, body)

    def cast(self, x, dtype: DType):
        if x.dtype == dtype:
            return x
        return self.b.op("cast", x.type.with_dtype(dtype), x=x,
                         dtype={DType.f32: "fp32", DType.f16: "fp16"}[dtype])


def upcast(ctx, node, inputs, fn: Callable[..., object]):
    """``fn(fx, *inputs)`` evaluated in fp32, its result cast to the node's output dtype."""
    want = ctx.out_type(node)
    fx = Fx(ctx.b, DType.f32)
    out = fn(fx, *[fx.cast(v, DType.f32) for v in inputs])
    return fx.cast(out, want.dtype)


def broadcast_all(fx: Fx, xs, shape) -> List:
    """Each of ``xs`` at the full ``shape`` (loop state needs one shape)."""
    out = []
    for x in xs:
        out.append(x if tuple(x.shape) == tuple(shape) else
                   fx.add(x, fx.b.full(TensorType(tuple(shape), fx.dt), 0)))
    return out


def max_of(fx: Fx, x):
    """The largest element of ``x`` (rank >= 1), a rank-0 var."""
    return fx.b.op("reduce_max", TensorType((), x.dtype), x=x,
                   axes=np.arange(x.type.rank, dtype=np.int32))


def any_true(fx: Fx, mask):
    """A bool[] that is True when some element of the float 0/1 ``mask`` is 1."""
    return fx.gt(max_of(fx, mask), 0)


def while_loop(b, init: Sequence, cond: Callable, body: Callable) -> tuple:
    """MIL ``while_loop`` over vars ``init``: ``cond(carry) -> bool[]``, ``body(carry) ->
    new carry`` (same types). Outer vars may be read inside both."""
    types = [v.type for v in init]
    carry = b.begin_block(types)
    cond_blk = b.end_block([cond(carry)])
    carry = b.begin_block(types)
    body_blk = b.end_block(list(body(carry)))
    return b.op_with_blocks("while_loop", types, [cond_blk, body_blk], loop_vars=list(init))
