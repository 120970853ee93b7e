"""Frontend rules: windowed reductions (max/min/avg pooling) and the primitives JAX's own
AD emits for them (select_and_scatter_add, select_and_gather_add).

Padding and base dilation become an explicit ``pad`` with the reduction's identity
(-inf / +inf / 0: exactly what XLA pads with), so the RLX pool ops only see unpadded
windows; see rlxjax/ir/pool.py.
"""
from __future__ import annotations

import numpy as np

from ... import _jax_compat as jc
from ...ir import DType
from ..registry import rule
from .reduce_generic import monoids, window_body, window_monoid

_KIND = {"reduce_window_max": "max", "reduce_window_min": "min", "reduce_window_sum": "sum"}
_SELECT_KIND = {"ge": "max", "le": "min"}


def _identity(kind, dtype: DType):
    np_dtype = dtype.np
    if kind == "sum":
        return np.zeros((), np_dtype)
    if dtype.is_float:
        return np.asarray(-np.inf if kind == "max" else np.inf, np_dtype)
    info = np.iinfo(np_dtype)
    return np.asarray(info.min if kind == "max" else info.max, np_dtype)


def _ints(t):
    return tuple(int(v) for v in t)


def _native(x) -> bool:
    """Whether the RLX pool ops (max / min / sum of f32, f16, int32) take ``x``; other
    dtypes and reducers go through frontend/rules/reduce_generic.py."""
    return x.dtype in (DType.f32, DType.f16, DType.i32)


def _pad(ctx, x, value, padding, base_dilation=None):
    """lax.pad with the given (lo, hi) padding and base dilation as interior padding."""
    base = base_dilation or (1,) * len(padding)
    cfg = tuple((int(lo), int(hi), int(b) - 1) for (lo, hi), b in zip(padding, base))
    if all(c == (0, 0, 0) for c in cfg):
        return x
    return ctx.add("pad", x, value if not isinstance(value, np.ndarray) else ctx.constant(value),
                   config=cfg)


def _window(ctx, eqn, x):
    """(window, strides, dilation) of an equation, after checking that the output is not
    empty (a zero-sized tensor has no Core ML counterpart)."""
    p = eqn.params
    window, strides = _ints(p["window_dimensions"]), _ints(p["window_strides"])
    dilation = _ints(p.get("window_dilation") or (1,) * len(window))
    if any(lo < 0 or hi < 0 for lo, hi in p["padding"]):
        raise ctx.unsupported(f"negative window padding {tuple(p['padding'])}")
    if any(d == 0 for d in eqn.outvars[0].aval.shape):
        raise ctx.unsupported(f"window {window} larger than the padded input {x.shape}: "
                              "the result is empty")
    return window, strides, dilation


def window_reduce(ctx, kind, x, window, strides, dilation):
    """RLX reduce_window_<kind> of an already padded x (nothing when the window is trivial)."""
    if set(window) | set(strides) <= {1}:
        return x
    return ctx.add(f"reduce_window_{kind}", x, window=window, strides=strides,
                   dilation=dilation)


for _p in _KIND:

    @rule(_p)
    def _reduce_window(ctx, eqn, x, _p=_p):
        kind = _KIND[_p]
        window = _window(ctx, eqn, x)
        if not _native(x):  # bool / int8 / uint8
            return window_monoid(ctx, _OPS[kind], x, None, eqn.params["padding"],
                                 eqn.params["base_dilation"], *window)
        padded = _pad(ctx, x, _identity(kind, x.dtype), eqn.params["padding"],
                      eqn.params["base_dilation"])
        return window_reduce(ctx, kind, padded, *window)


_MONOIDS = {"max": "max", "min": "min", "add": "sum"}
_OPS = {"max": "max", "min": "min", "sum": "add"}


@rule("reduce_window")
def _reduce_window_generic(ctx, eqn, *args):
    """lax.reduce_window with a jaxpr reducer. XLA (CPU, the oracle) starts every window
    from the init value and skips padded and base-dilation positions (an init of 0.25 is
    added once per window, not once per padded position), so with a monoid reducer the
    result is ``op(init, window_reduce(pad(x, identity)))``; any other reducer (or several
    operands) runs tap by tap (frontend/rules/reduce_generic.py). JAX has no reverse-mode rule
    for this primitive; rlxjax's gradient of a max/min reducer follows the pooling convention
    (first extremum of each window) for the window part and lax.max's (ties with the init
    value share) for the final op."""
    p = eqn.params
    closed = p["jaxpr"]
    if not isinstance(closed, jc.ClosedJaxpr):
        closed = jc.ClosedJaxpr(closed, list(p.get("consts") or ()))
    n = len(args) // 2
    xs, inits = list(args[:n]), list(args[n:])
    window = _window(ctx, eqn, xs[0])
    ops = monoids(closed, n)
    if ops is None or n != 1:
        return window_body(ctx, closed, xs, inits, p["padding"], p["base_dilation"], *window,
                           tuple(eqn.outvars[0].aval.shape))
    (op,), (x,), (init,) = ops, xs, inits
    if not _native(x) or op not in _OPS.values():
        return window_monoid(ctx, op, x, init, p["padding"], p["base_dilation"], *window)
    kind = _MONOIDS[op]
    padded = _pad(ctx, x, _identity(kind, x.dtype), p["padding"], p["base_dilation"])
    y = window_reduce(ctx, kind, padded, *window)
    return ctx.add(op, y, init)


def _select_kind(ctx, eqn):
    sel = eqn.params["select_prim"].name
    if sel not in _SELECT_KIND:
        raise ctx.unsupported(f"select_prim {sel} (only ge / le, as max / min pooling emit)")
    return sel


@rule("select_and_scatter_add")
def _select_and_scatter_add(ctx, eqn, source, operand):
    # As JAX's CPU lowering: pad the operand with the selection's identity (padded positions
    # can be selected, their cotangent is dropped), scatter, cut the padding off.
    sel = _select_kind(ctx, eqn)
    window, strides, dilation = _window(ctx, eqn, operand)
    if operand.dtype == DType.bool:  # False < True; the scattered sum of bools is their OR
        source, operand = (ctx.add("convert", v, dtype=DType.i32) for v in (source, operand))
        out = _select_and_scatter_add(ctx, eqn, source, operand)
        return ctx.add("ne", out, ctx.constant(np.zeros((), np.int32)))
    padding = eqn.params["padding"]
    padded = _pad(ctx, operand, _identity(_SELECT_KIND[sel], operand.dtype), padding)
    out = ctx.add("select_and_scatter_add", source, padded, select=sel, window=window,
                  strides=strides, dilation=dilation)
    if padded is operand:
        return out
    start = tuple(int(lo) for lo, _ in padding)
    limit = tuple(s + n for s, n in zip(start, operand.shape))
    return ctx.add("slice", out, start=start, limit=limit, strides=(1,) * len(start))


@rule("select_and_gather_add")
def _select_and_gather_add(ctx, eqn, tangents, operand):
    sel = _select_kind(ctx, eqn)
    window = _window(ctx, eqn, operand)
    p = eqn.params
    padded = _pad(ctx, operand, _identity(_SELECT_KIND[sel], operand.dtype), p["padding"],
                  p["base_dilation"])
    t = _pad(ctx, tangents, np.zeros((), tangents.dtype.np), p["padding"], p["base_dilation"])
    w, s, d = window
    return ctx.add("select_and_gather_add", t, padded, select=sel, window=w, strides=s,
                   dilation=d)
