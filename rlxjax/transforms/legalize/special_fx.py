"""``Fx``: float32 elementwise arithmetic on RLX values that reads like the formula, so that
ir/special_eval.py's and ir/special_incomplete.py's compositions are built once, in the RLX
graph, for a format without those special functions (special.py; the Core ML format runs
its own, coreml/rules/special/). Every operand may be a value or a Python number (a rank-0
float32 constant). The loops (igamma, betainc) are RLX ``while``s whose regions read the
outer values they use as their own consts (captured as the region is traced); their
carries are float tensors of one shape and rank-0 floats, built without
``broadcast_in_dim`` (splat constants) and yielding no carry into another's slot
(docs/coreai.md's loop hazards).

The forms avoid what a compiler may fold wrongly or a runtime computes inexactly (measured
on Core AI): ``le`` / ``ge`` are ``lt or eq`` / ``gt or eq`` (false with NaN, as IEEE),
and a test ``x == ±inf`` is ``x > FLT_MAX`` / ``x < -FLT_MAX``: Core AI's compiler folded
``equal(2.0, inf)`` of two constants to true (zeta(2, x) with a constant 2 came out all
NaN); ``floor`` is the RLX op, whose lowering must keep ±inf (Core AI's does).
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, Graph
from ...ir.builder import Builder
from ...ir.special_eval import FxCommon

F32 = DType.f32


class Fx(FxCommon):
    def __init__(self, b: Builder):
        self.b, self.dt = b, F32
        self._caps = None  # while a loop region is traced: outer value id -> region input
        self._local = None  # ... and the ids of the region's own values

    def v(self, x):
        if isinstance(x, (int, float, np.floating, np.integer)):
            return self._own(self.b.constant(np.float32(x)))
        if self._caps is None or id(x) in self._local:
            return x
        if id(x) not in self._caps:  # an outer value: the region's const
            self._caps[id(x)] = (x, self.b.graph.add_input(f"k{len(self._caps)}", x.type))
        return self._caps[id(x)][1]

    def _own(self, out):
        if self._local is not None:
            self._local.add(id(out))
        return out

    def op(self, name, *xs, **params):
        return self._own(self.b.add(name, *[self.v(x) for x in xs], **params))

    # -- arithmetic ------------------------------------------------------------------------
    def add(self, x, y):
        return self.op("add", x, y)

    def sub(self, x, y):
        return self.op("sub", x, y)

    def mul(self, x, y):
        return self.op("mul", x, y)

    def div(self, x, y):
        return self.op("div", x, y)

    def pow(self, x, y):
        return self.op("pow", x, y)

    def max(self, x, y):
        return self.op("max", x, y)

    def min(self, x, y):
        return self.op("min", x, y)

    def neg(self, x):
        return self.op("neg", x)

    def square(self, x):
        return self.mul(x, x)

    def __getattr__(self, name):  # the unary ops of the RLX op set: f.exp(x), f.floor(x), ...
        if name in ("abs", "floor", "sqrt", "exp", "log", "log1p", "sin", "cos", "tan", "atan"):
            return lambda x: self.op(name, x)
        raise AttributeError(name)

    # -- comparisons and logic ---------------------------------------------------------------
    def lt(self, x, y):
        return self.op("lt", x, y)

    def gt(self, x, y):
        return self.op("gt", x, y)

    def eq(self, x, y):
        if isinstance(y, (float, np.floating)) and np.isinf(y):
            big = float(np.finfo(np.float32).max)  # x == ±inf as x > FLT_MAX / x < -FLT_MAX
            return self.gt(x, big) if y > 0 else self.lt(x, -big)
        return self.op("eq", x, y)

    def ne(self, x, y):
        return self.op("ne", x, y)

    def le(self, x, y):
        return self.or_(self.lt(x, y), self.eq(x, y))

    def ge(self, x, y):
        return self.or_(self.gt(x, y), self.eq(x, y))

    def and_(self, p, q):
        return self.op("and", p, q)

    def or_(self, p, q):
        return self.op("or", p, q)

    def not_(self, p):
        return self.op("not", p)

    def isnan(self, x):
        return self.ne(x, x)

    def isinf(self, x):
        return self.eq(self.abs(x), np.inf)

    def select(self, cond, on_true, on_false):
        t = self.v(on_true)  # (its constant made first)
        return self.op("select", cond, on_false, t)

    # -- loops (ir/special_incomplete.py) ----------------------------------------------------
    def full_like(self, x, value):
        """``value`` at ``x``'s shape: a splat constant (no ``broadcast_in_dim``)."""
        return self._own(self.b.constant(np.full(tuple(x.type.shape), value, np.float32)))

    def scalar(self, value):
        """A rank-0 float32 constant."""
        return self._own(self.b.constant(np.float32(value)))

    def mask(self, p):
        """The bool ``p`` as 0/1 floats."""
        return self.select(p, 1.0, 0.0)

    def _sum_all(self, mask):
        """The sum of a 0/1 ``mask`` (rank 0): exact for any count, where a float
        ``reduce_max`` would add the NaN propagation of its lowering to every loop step."""
        return self.op("reduce_sum", mask, axes=tuple(range(mask.type.rank)))

    def max_all(self, mask):
        """The largest element of a 0/1 ``mask`` as a rank-0 value: min(its sum, 1)."""
        return self.min(self._sum_all(mask), 1.0)

    def any_true(self, mask):
        return self.gt(self._sum_all(mask), 0.0)

    def while_loop(self, init, cond, body):
        types = [v.type for v in init]
        cg, c_caps = self._region("cond", types, lambda s: [cond(s)])
        bg, b_caps = self._region("body", types, body)
        node = self.b.graph.add_node(
            "while", c_caps + b_caps + [self.v(v) for v in init],
            {"n_cond_consts": len(c_caps), "n_body_consts": len(b_caps)}, self.b.source,
            {"cond": cg, "body": bg})
        return [self._own(o) for o in node.outputs]

    def _region(self, name, types, fn):
        """(the region ``fn(carry) -> outputs`` traced into a graph, the outer values it
        reads: its consts, the region's first inputs)."""
        g = Graph(name)
        carry = [g.add_input(f"c{k}", t) for k, t in enumerate(types)]
        saved = self.b, self._caps, self._local
        self.b, self._caps, self._local = Builder(g, saved[0].source), {}, {id(v) for v in carry}
        try:
            for k, o in enumerate(fn(carry)):
                g.add_output(f"o{k}", self.v(o))
            caps = list(self._caps.values())
        finally:
            self.b, self._caps, self._local = saved
        g.inputs[:] = g.inputs[len(carry):] + g.inputs[:len(carry)]  # the consts first
        return g, [self.v(outer) for outer, _ in caps]
