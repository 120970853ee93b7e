"""Reductions with a reducer: ``lax.reduce`` (any number of operands, any reducer jaxpr,
init values that need not be identities), and the window reductions that the RLX pool
ops do not cover (frontend/rules/pool.py): a ``mul`` reducer, bool / int8 / uint8
operands, a reducer that is not one op.

XLA's semantics, which these follow: a reduction starts from the init value once (an
init of 3 in a sum adds 3 once, not once per element); a window reduction skips padded
and base-dilation positions (they do not enter the reducer at all).

Two ways to reduce:

- a **monoid** (each output is one add / mul / max / min / and / or / xor of its two
  arguments): the native RLX reductions where Core ML has them (reduce_sum / prod / max /
  min of f32, f16, int32), else a tree of the op; bool runs as or / and, int8 / uint8 in
  int32 (an 8-bit product wrapped after every step, so nothing overflows; a sum wrapped
  once at the end, which is the same modulo 256);
- any other reducer (e.g. an argmax-style variadic one): its jaxpr applied elementwise to
  whole tensors (vmapped by JAX), in a halving tree over each reduced axis (lower indices
  as the first argument), or, for windows, tap after tap in row-major order from the init.
"""
from __future__ import annotations

import itertools

import jax
import numpy as np

from ... import _jax_compat as jc
from ...ir import DType
from ..registry import rule
from .bitwise import NARROW, wrap

_PRIMS = {"add": "add", "add_any": "add", "mul": "mul", "max": "max", "min": "min",
          "and": "and", "or": "or", "xor": "xor"}
_BOOL_OP = {"add": "or", "max": "or", "or": "or", "mul": "and", "min": "and", "and": "and",
            "xor": "xor"}
_NATIVE = {"add": "reduce_sum", "mul": "reduce_prod", "max": "reduce_max", "min": "reduce_min"}


def monoids(closed, n):
    """Per operand, the op of a reducer whose output k is one binary op of its inputs k
    and n + k (in either order) and that computes nothing else; else None."""
    jaxpr = closed.jaxpr
    if closed.consts or len(jaxpr.outvars) != n or len(jaxpr.eqns) != n:
        return None
    made = {id(o): e for e in jaxpr.eqns for o in e.outvars}
    ops = []
    for k, o in enumerate(jaxpr.outvars):
        e = made.get(id(o))
        if e is None or e.primitive.name not in _PRIMS or len(e.invars) != 2:
            return None
        a, b = jaxpr.invars[k], jaxpr.invars[n + k]
        if not ((e.invars[0] is a and e.invars[1] is b) or (e.invars[0] is b and e.invars[1] is a)):
            return None
        ops.append(_PRIMS[e.primitive.name])
    return ops


class Domain:
    """Where a monoid ``op`` on ``dtype`` values is computed: bool as or / and, int8 /
    uint8 as int32 values (wrapped back at the end), other dtypes as themselves."""

    def __init__(self, ctx, op: str, dtype: DType):
        self.ctx, self.dtype = ctx, dtype
        self.op = _BOOL_OP[op] if dtype == DType.bool else op
        self.narrow = dtype in NARROW
        if op in ("and", "or", "xor") and dtype not in NARROW + (DType.i32, DType.bool):
            raise ctx.unsupported(f"bitwise '{op}' reduction of {dtype}")

    def lift(self, x):
        return self.ctx.add("convert", x, dtype=DType.i32) if self.narrow else x

    def lower(self, v):
        if not self.narrow:
            return v
        if self.op in ("add", "mul"):
            return wrap(self.ctx, v, self.dtype)
        return self.ctx.add("convert", v, dtype=self.dtype)  # in range already

    def combine(self, a, b):
        r = self.ctx.add(self.op, a, b)
        if self.narrow and self.op == "mul":  # |a|, |b| < 256: keep them there
            r = self.ctx.add("rem", r, self.ctx.constant(np.int32(256)))
        return r

    def identity(self) -> np.ndarray:
        """The op's identity, in the computation dtype."""
        op, dt = self.op, self.dtype
        comp = DType.i32 if self.narrow else dt
        if dt == DType.bool:
            return np.asarray(op == "and")
        if op in ("add", "or", "xor"):
            return np.zeros((), comp.np)
        if op == "mul":
            return np.ones((), comp.np)
        if op == "and":
            return np.asarray(-1, comp.np)
        if dt.is_float:
            return np.asarray(-np.inf if op == "max" else np.inf, comp.np)
        info = np.iinfo(dt.np)  # of the operand's own dtype (int8's range in int32)
        return np.asarray(info.min if op == "max" else info.max, comp.np)

    def native(self):
        """The RLX reduction computing this monoid, or None."""
        if self.dtype in (DType.f32, DType.f16, DType.i32) and self.op in _NATIVE:
            return _NATIVE[self.op]
        return None


# -- applying a reducer jaxpr to tensors ----------------------------------------------------
def apply_body(ctx, closed, args):
    """The reducer ``closed`` (a jaxpr of scalars) applied elementwise to RLX tensors of
    one shape: JAX maps it over a flat batch (jax.vmap), and that jaxpr is translated."""
    shape = tuple(args[0].shape)
    n = int(np.prod(shape, dtype=np.int64))
    flat = [ctx.reshape(a, (n,)) for a in args]
    specs = [jax.ShapeDtypeStruct((n,), v.aval.dtype) for v in closed.jaxpr.invars]
    batched = jax.make_jaxpr(jax.vmap(jc.jaxpr_as_fun(closed)))(*specs)
    outs = ctx.eval_jaxpr(batched.jaxpr, batched.consts, flat)
    return [ctx.reshape(o, shape) for o in outs]


def _slice_axis(ctx, x, axis, start, stop):
    if start == 0 and stop == x.shape[axis]:
        return x
    lo = tuple(start if i == axis else 0 for i in range(x.type.rank))
    hi = tuple(stop if i == axis else d for i, d in enumerate(x.shape))
    return ctx.add("slice", x, start=lo, limit=hi, strides=(1,) * x.type.rank)


def tree_reduce(ctx, combine, xs, axes):
    """Reduce the tensors ``xs`` (one shape) over ``axes`` with ``combine(list_a, list_b)
    -> list``: halving along each axis, the lower half first; an odd element out is
    carried to the next round."""
    for axis in sorted(axes, reverse=True):
        while xs[0].shape[axis] > 1:
            size = xs[0].shape[axis]
            m = size // 2
            out = combine([_slice_axis(ctx, x, axis, 0, m) for x in xs],
                          [_slice_axis(ctx, x, axis, m, 2 * m) for x in xs])
            if size % 2:
                out = [ctx.add("concatenate", o, _slice_axis(ctx, x, axis, 2 * m, size),
                               axis=axis) for o, x in zip(out, xs)]
            xs = out
        xs = [ctx.reshape(x, tuple(d for i, d in enumerate(x.shape) if i != axis)) for x in xs]
    return xs


def reduce_monoid(ctx, op, x, init, axes):
    """lax.reduce of one operand with a monoid ``op`` and ``init`` (combined once; None:
    no init, as in reduce_sum / reduce_max / ...)."""
    dom = Domain(ctx, op, x.dtype)
    v = dom.lift(x)
    if axes:
        native = dom.native()
        if native is not None:
            v = ctx.add(native, v, axes=tuple(axes))
        elif dom.dtype == DType.bool and dom.op in ("or", "and"):  # any / all
            r = ctx.add("reduce_max" if dom.op == "or" else "reduce_min",
                        ctx.add("convert", v, dtype=DType.i32), axes=tuple(axes))
            v = ctx.add("convert", r, dtype=DType.bool)
        else:
            (v,) = tree_reduce(ctx, lambda a, b: [dom.combine(a[0], b[0])], [v], axes)
    if init is not None:
        v = dom.combine(dom.lift(init), v)
    return dom.lower(v)


@rule("reduce_xor")
def _reduce_xor(ctx, eqn, x):
    return reduce_monoid(ctx, "xor", x, None, tuple(sorted(int(a) for a in eqn.params["axes"])))


@rule("reduce")
def _reduce(ctx, eqn, *args):
    n = len(args) // 2
    xs, inits = list(args[:n]), list(args[n:])
    axes = tuple(sorted(int(a) for a in eqn.params["dimensions"]))
    closed = eqn.params["jaxpr"]
    ops = monoids(closed, n)
    if ops is not None:
        return [reduce_monoid(ctx, op, x, i, axes) for op, x, i in zip(ops, xs, inits)]
    ys = tree_reduce(ctx, lambda a, b: apply_body(ctx, closed, a + b), xs, axes)
    shape = tuple(ys[0].shape)
    start = [ctx.broadcast(i, shape, ()) for i in inits]
    return apply_body(ctx, closed, start + ys)


# -- window reductions ------------------------------------------------------------------------
def _tap(ctx, x, offsets, out_shape, strides):
    """x[o_a + i*s_a for i < n_out_a, per axis a] (a strided slice)."""
    start = tuple(int(o) for o in offsets)
    limit = tuple(o + (n - 1) * s + 1 for o, n, s in zip(start, out_shape, strides))
    if start == (0,) * len(start) and limit == tuple(x.shape) and set(strides) <= {1}:
        return x
    return ctx.add("slice", x, start=start, limit=limit, strides=tuple(strides))


def window_monoid(ctx, op, x, init, padding, base_dilation, window, strides, dilation):
    """A window reduction of one operand with a monoid ``op`` (separable: one axis at a
    time), started once from ``init`` (None: the identity)."""
    dom = Domain(ctx, op, x.dtype)
    v = dom.lift(x)
    cfg = _pad_config(padding, base_dilation)
    if any(c != (0, 0, 0) for c in cfg):
        v = ctx.add("pad", v, ctx.constant(dom.identity()), config=cfg)
    rank = v.type.rank
    for a in range(rank):
        k, s, d = window[a], strides[a], dilation[a]
        if k == 1 and s == 1:
            continue
        n_out = (v.shape[a] - (k - 1) * d - 1) // s + 1
        shape = tuple(n_out if i == a else n for i, n in enumerate(v.shape))
        st = tuple(s if i == a else 1 for i in range(rank))
        acc = None
        for j in range(k):
            t = _tap(ctx, v, tuple(j * d if i == a else 0 for i in range(rank)), shape, st)
            acc = t if acc is None else dom.combine(acc, t)
        v = acc
    if init is not None:
        v = dom.combine(dom.lift(init), v)
    return dom.lower(v)


def _pad_config(padding, base_dilation):
    base = base_dilation or (1,) * len(padding)
    return tuple((int(lo), int(hi), int(b) - 1) for (lo, hi), b in zip(padding, base))


def window_body(ctx, closed, xs, inits, padding, base_dilation, window, strides, dilation,
                out_shape):
    """A window reduction with any reducer: from the init, the reducer applied tap after
    tap in row-major window order; a tap on a padded or base-dilation position leaves the
    accumulator as it is (XLA skips those positions)."""
    cfg = _pad_config(padding, base_dilation)
    valid = None
    if any(c != (0, 0, 0) for c in cfg):
        xs = [ctx.add("pad", x, i, config=cfg) for x, i in zip(xs, inits)]
        valid = _operand_positions(xs[0].shape, cfg)
    acc = [ctx.broadcast(i, out_shape, ()) for i in inits]
    for js in itertools.product(*(range(k) for k in window)):
        offs = tuple(j * d for j, d in zip(js, dilation))
        taps = [_tap(ctx, x, offs, out_shape, strides) for x in xs]
        new = apply_body(ctx, closed, acc + taps)
        if valid is not None:
            ok = _tap_const(valid, offs, out_shape, strides)
            if not ok.all():
                m = ctx.constant(ok)
                new = [ctx.add("select", m, a, b) for a, b in zip(acc, new)]
        acc = new
    return acc


def _operand_positions(shape, cfg):
    """Bool array of the padded shape: True at the operand's own positions (not padding,
    not base-dilation holes); ``cfg`` has non-negative (lo, hi, interior) per axis."""
    out = np.ones(shape, bool)
    for a, ((lo, hi, interior), n) in enumerate(zip(cfg, shape)):
        m = np.zeros(n, bool)
        m[lo:n - hi:interior + 1] = True
        out &= m.reshape([-1 if i == a else 1 for i in range(len(shape))])
    return out


def _tap_const(arr, offsets, out_shape, strides):
    sl = tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offsets, out_shape, strides))
    return arr[sl]
