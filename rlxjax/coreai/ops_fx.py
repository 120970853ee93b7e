"""``Fx``: float32 elementwise arithmetic on Core AI values that reads like the formula, with
the method names of the Core ML lowering's ``Fx`` (coreml/rules/special/compose.py), so
that ir/special_eval.py's and ir/special_incomplete.py's compositions run on Core AI
(ops_special2.py). Every operand may be a value or a Python number (a rank-0 float32
constant). No rule is registered here. The loops (igamma, betainc) are Core AI ``while``s
whose carries are float tensors of one shape and rank-0 floats, built without
``broadcast_to`` (splat constants) or ``gather_along_axis`` and yielding no carry into
another's slot (docs/coreai.md's loop hazards); measured to end and agree with float64.

Core AI's own pitfalls are handled here once: ``log1p`` is ops_elementwise.py's rule (its
compiler folds Goldberg's ``(x + 1) − 1``), ``floor`` is the exact floor_divide form,
``le`` / ``ge`` are ``lt or eq`` / ``gt or eq`` (false with NaN, as IEEE), and a test
``x == ±inf`` is ``x > FLT_MAX`` / ``x < -FLT_MAX``: Core AI's compiler folded
``equal(2.0, inf)`` of two constants to true (measured: zeta(2, x) with a constant 2 came
out all NaN).
"""
from __future__ import annotations

from types import SimpleNamespace
import numpy as np

from ..ir import DType, TensorType
from ..ir.special_eval import FxCommon
from . import ca_private
from .ops_base import RULES

F32 = DType.f32


class Fx(FxCommon):
    def __init__(self, ctx):
        self.ctx, self.ca, self.dt = ctx, ctx.ca, F32

    def v(self, x):
        return self.ctx.scalar(float(x), F32) if isinstance(x, (int, float, np.floating,
                                                                 np.integer)) else x

    # -- arithmetic ------------------------------------------------------------------------
    def add(self, x, y):
        return self.ctx.add(self.v(x), self.v(y))

    def sub(self, x, y):
        return self.ctx.sub(self.v(x), self.v(y))

    def mul(self, x, y):
        return self.ctx.mul(self.v(x), self.v(y))

    def div(self, x, y):
        return self.ctx.div(self.v(x), self.v(y))

    def pow(self, x, y):
        return self.ca.broadcasting_pow(self.v(x), self.v(y))

    def max(self, x, y):
        return self.ca.broadcasting_maximum(self.v(x), self.v(y))

    def min(self, x, y):
        return self.ca.broadcasting_minimum(self.v(x), self.v(y))

    def neg(self, x):
        return self.ctx.neg(x, F32)

    def abs(self, x):
        return self.ca.abs_(x)

    def floor(self, x):
        """floor(x) exactly: float floor_divide by 1, ±inf (NaN there) passed through."""
        fl = self.ca.broadcasting_floor_divide(x, self.v(1.0))
        return self.select(self.isinf(x), x, fl)

    def sqrt(self, x):
        return self.ca.sqrt(x)

    def exp(self, x):
        return self.ca.exp(x)

    def log(self, x):
        return self.ca.log(x)

    def sin(self, x):
        return self.ca.sin(x)

    def cos(self, x):
        return self.ca.cos(x)

    def tan(self, x):
        return self.ca.tan(x)

    def atan(self, x):
        return self.ca.atan(x)

    def square(self, x):
        return self.mul(x, x)

    def log1p(self, x):
        node = SimpleNamespace(inputs=[SimpleNamespace(type=TensorType((), F32))])
        return RULES["log1p"](self.ctx, node, [x])

    # -- comparisons and logic ---------------------------------------------------------------
    def lt(self, x, y):
        return self.ctx.lt(self.v(x), self.v(y))

    def gt(self, x, y):
        return self.ctx.gt(self.v(x), self.v(y))

    def eq(self, x, y):
        if isinstance(y, (float, np.floating)) and np.isinf(y):
            # x == ±inf as x > FLT_MAX / x < -FLT_MAX: Core AI's compiler folded
            # equal(2.0, inf) of constants to true (measured)
            big = float(np.finfo(np.float32).max)
            return self.gt(x, big) if y > 0 else self.lt(x, -big)
        return self.ctx.eq(self.v(x), self.v(y))

    def ne(self, x, y):
        return self.ctx.ne(self.v(x), self.v(y))

    def le(self, x, y):
        return self.or_(self.lt(x, y), self.eq(x, y))

    def ge(self, x, y):
        return self.or_(self.gt(x, y), self.eq(x, y))

    def and_(self, p, q):
        return self.ctx.and_(p, q)

    def or_(self, p, q):
        return self.ctx.or_(p, q)

    def not_(self, p):
        return self.ca.not_(p)

    def isnan(self, x):
        return self.ne(x, x)

    def isinf(self, x):
        return self.eq(self.abs(x), np.inf)

    def select(self, cond, on_true, on_false):
        return self.ctx.where(cond, self.v(on_true), self.v(on_false))

    # -- loops (ir/special_incomplete.py) ----------------------------------------------------
    def full_like(self, x, value):
        """``value`` at ``x``'s shape: a splat constant (no ``broadcast_to``)."""
        return self.ctx.const(np.full(self.ctx.shape(x), value, np.float32))

    def scalar(self, value):
        """A rank-0 float32 constant."""
        return self.ctx.const(np.float32(value))

    def mask(self, p):
        """The bool ``p`` as 0/1 floats."""
        return self.select(p, 1.0, 0.0)

    def max_all(self, x):
        """The largest element of ``x`` as a rank-0 value (Core AI's reduce_max skips NaN:
        used on 0/1 masks only)."""
        return self.ctx.reduce("max", x, list(range(len(self.ctx.shape(x)))), keep_shape=())

    def any_true(self, mask):
        return self.gt(self.max_all(mask), 0.0)

    def while_loop(self, init, cond, body):
        return ca_private.while_loop(list(init), cond, body)
