"""Prepared numpy calls for the accelerated reference path's most frequent ops.

``prepare_call(op, signatures, constants)`` is called once per loaded op (``interpreter.Op``) by
``AcceleratedProgram``. Given the declared signatures of the op's named inputs and the values
of constant ones, it may return a ``PreparedCall``: a function of the op's input values that makes
exactly the numpy calls the op's general implementation (``../ops/``, through its public tables
``ARITH`` / ``COMPARE`` / ``UNARY`` / ``REDUCE`` and helpers) would make for those input
types, minus the per-call decoding and checks the signatures already settle (constant
parameters converted once, dtype promotion decided once). Results are bit-identical to the
general implementation's: tests/coreml/interpreter/test_accelerated_equivalence.py runs both.

The signatures come from the program's declarations (function inputs, consts, each op's
declared outputs); the interpreter checks every op's outputs against its declaration on the
op's first execution, so from then on each named input really has its declared dtype and
shape. Ops or input types not covered here return ``None``: the general implementation runs.
"""
from __future__ import annotations

import numpy as np

from ..interpreter import CONST, NAME
from ..ops import elementwise, reduction
from ..ops import shape as shape_ops
from ..ops.common import STR_TO_DTYPE, acc_dtype, out, to_bool_list, to_int_list

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))
_NUMERIC = _FLOATS + (np.dtype(np.int32),)


class _Arg:
    """One bound input: a named value (``name``, with its declared signature) or a constant."""

    __slots__ = ("name", "value", "dtype", "shape")

    def __init__(self, name=None, value=None, sig=None):
        self.name, self.value = name, value
        if name is None:
            v = np.asarray(value)
            self.dtype, self.shape = v.dtype, tuple(v.shape)
        elif sig is not None:
            self.dtype, self.shape = sig
        else:
            self.dtype = self.shape = None

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)


def _const(args, key):
    """A constant parameter's value, or None if absent or not constant."""
    a = args.get(key)
    return None if a is None or a.name is not None else a.value


def _binary(op, args, out_sigs):
    fn = elementwise.ARITH.get(op) or elementwise.COMPARE.get(op)
    x, y = args.get("x"), args.get("y")
    if fn is None or x is None or y is None or len(args) != 2:
        return None
    if x.dtype is None or y.dtype is None or x.dtype != y.dtype or x.dtype not in _NUMERIC:
        return None
    # Some operand of known rank > 0: numpy returns an ndarray (never a numpy scalar); equal
    # dtypes: promote() is that dtype, so the general path's out() is a no-op.
    if not ((x.rank or 0) > 0 or (y.rank or 0) > 0):
        return None
    if x.name is None and y.name is None:
        return None
    return fn, (x, y)


def _unary(op, args, out_sigs):
    entry = elementwise.UNARY.get(op)
    x = args.get("x")
    if entry is None or x is None or x.name is None or len(args) != 1:
        return None
    if x.dtype not in _FLOATS or not x.rank:
        return None
    return entry[0], (x,)


def _reshape(op, args, out_sigs):
    x, to = args.get("x"), _const(args, "shape")
    if x is None or x.name is None or to is None or len(args) != 2:
        return None
    if x.shape is None or any(d is None for d in x.shape):
        return None
    try:  # the general implementation resolves 0 / -1 entries for this input shape
        (probe,) = shape_ops.reshape({"x": np.empty(x.shape, np.int8), "shape": to})
    except Exception:  # noqa: BLE001 - leave errors to the general path
        return None
    shape = probe.shape
    return (lambda v: v.reshape(shape)), (x,)


def _transpose(op, args, out_sigs):
    x, perm = args.get("x"), _const(args, "perm")
    if x is None or x.name is None or perm is None or len(args) != 2:
        return None
    perm = [int(i) for i in np.asarray(perm).reshape(-1)]
    if x.rank != len(perm):
        return None
    return (lambda v: np.transpose(v, perm)), (x,)


def _matmul(op, args, out_sigs):
    x, y = args.get("x"), args.get("y")
    if x is None or y is None or not set(args) <= {"x", "y", "transpose_x", "transpose_y"}:
        return None
    flags = []
    for k in ("transpose_x", "transpose_y"):
        if k in args and args[k].name is not None:
            return None
        flags.append(bool(np.asarray(args[k].value).reshape(())) if k in args else False)
    if x.dtype is None or x.dtype != y.dtype or x.dtype not in _FLOATS:
        return None
    if x.rank is None or y.rank is None or x.rank < 2 or y.rank < 2:
        return None
    acc = acc_dtype(x.dtype)
    dt, tx, ty = x.dtype, flags[0], flags[1]

    def run(a, b):
        if tx:
            a = np.swapaxes(a, -1, -2)
        if ty:
            b = np.swapaxes(b, -1, -2)
        return out(np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False)), dt)

    return run, (x, y)


def _reduce(op, args, out_sigs):
    entry = reduction.REDUCE.get(op)
    x = args.get("x")
    if entry is None or x is None or x.name is None or not set(args) <= {"x", "axes", "keep_dims"}:
        return None
    if x.dtype not in _NUMERIC or x.rank is None:
        return None
    if any(k in args and args[k].name is not None for k in ("axes", "keep_dims")):
        return None
    axes = _const(args, "axes")
    axes = None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
    keep = bool(np.asarray(_const(args, "keep_dims")).reshape(())) if "keep_dims" in args else False
    fn, accumulates = entry
    dt = x.dtype
    acc = acc_dtype(dt) if accumulates else dt
    return (lambda v: out(fn(v.astype(acc, copy=False), axis=axes, keepdims=keep), dt)), (x,)


def _cast(op, args, out_sigs):
    x, name = args.get("x"), _const(args, "dtype")
    if x is None or x.name is None or name is None or len(args) != 2:
        return None
    dt = STR_TO_DTYPE.get(str(name))
    if dt is None:
        return None
    return (lambda v: v.astype(dt)), (x,)


def _select(op, args, out_sigs):
    c, a, b = args.get("cond"), args.get("a"), args.get("b")
    if c is None or a is None or b is None or len(args) != 3:
        return None
    if c.dtype != np.bool_ or a.dtype is None or a.dtype != b.dtype:
        return None
    if not any((t.rank or 0) > 0 for t in (c, a, b)):
        return None
    return np.where, (c, a, b)


class _IndexProbe:
    """Stands in for x in the general slice implementation: records the index it is given."""

    def __init__(self, ndim):
        self.ndim = ndim

    def __getitem__(self, key):
        return key


def _slice_by_index(op, args, out_sigs):
    x = args.get("x")
    if x is None or x.name is None or x.rank is None or not x.rank:
        return None
    keys = set(args) - {"x"}
    if not {"begin", "end"} <= keys <= {"begin", "end", "stride", "begin_mask", "end_mask",
                                       "squeeze_mask"}:
        return None
    if any(args[k].name is not None for k in keys):
        return None
    begin, end = to_int_list(args["begin"].value), to_int_list(args["end"].value)
    if len(begin) != x.rank or len(end) != x.rank:
        return None
    opt = {}
    for k, conv in (("stride", to_int_list), ("begin_mask", to_bool_list),
                    ("end_mask", to_bool_list), ("squeeze_mask", to_bool_list)):
        opt[k] = conv(args[k].value) if k in args else None
    index = shape_ops.slice_index(_IndexProbe(x.rank), begin, end, **opt)
    squeeze = tuple(i for i, m in enumerate(opt["squeeze_mask"] or []) if m)
    if squeeze:
        return (lambda v: np.asarray(np.squeeze(v[index], axis=squeeze))), (x,)
    return (lambda v: np.asarray(v[index])), (x,)


def _pad(op, args, out_sigs):
    x, pads = args.get("x"), _const(args, "pad")
    if x is None or x.name is None or pads is None or x.shape is None or None in x.shape:
        return None
    if not set(args) <= {"x", "pad", "mode", "constant_val"}:
        return None
    if any(k in args and args[k].name is not None for k in ("mode", "constant_val")):
        return None
    if str(_const(args, "mode") or "constant") != "constant" or x.dtype not in _FLOATS:
        return None
    pads = to_int_list(pads)
    if len(pads) % 2 or len(pads) > 2 * x.rank or any(p < 0 for p in pads):
        return None
    widths = [(0, 0)] * (x.rank - len(pads) // 2) + list(zip(pads[::2], pads[1::2]))
    cval = np.asarray(_const(args, "constant_val") if "constant_val" in args else 0.0)
    # np.pad's constant mode: the value cast to x's dtype around a copy of x.
    fill = np.asarray(cval).astype(x.dtype)
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, widths))
    inner = tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, widths))
    dt = x.dtype

    def run(v):
        res = np.full(shape, fill, dtype=dt)
        res[inner] = v
        return res

    return run, (x,)


_BUILDERS = {"reshape": _reshape, "slice_by_index": _slice_by_index, "pad": _pad,
             "transpose": _transpose, "matmul": _matmul, "cast": _cast, "select": _select}
for _n in list(elementwise.ARITH) + list(elementwise.COMPARE):
    _BUILDERS[_n] = _binary
for _n in elementwise.UNARY:
    _BUILDERS[_n] = _unary
for _n in reduction.REDUCE:
    _BUILDERS[_n] = _reduce


class PreparedCall:
    """A prepared single-output op: ``fn(*values)`` with each argument either a named value
    (``names[i]`` not None) or a constant (``consts[i]``)."""

    __slots__ = ("fn", "names", "consts")

    def __init__(self, fn, args):
        self.fn = fn
        self.names = tuple(a.name for a in args)
        self.consts = tuple(a.value if a.name is None else None for a in args)

    def runner(self):
        """run(env) -> (output,), for the step-by-step interpreter loop."""
        fn, names, consts = self.fn, self.names, self.consts
        if len(names) == 1 and names[0] is not None:
            (a,) = names
            return lambda env: (fn(env[a]),)
        if len(names) == 2 and None not in names:
            a, b = names
            return lambda env: (fn(env[a], env[b]),)
        if len(names) == 2 and names[1] is None and names[0] is not None:
            a, c = names[0], consts[1]
            return lambda env: (fn(env[a], c),)
        pairs = tuple(zip(names, consts))
        return lambda env: (fn(*[c if n is None else env[n] for n, c in pairs]),)


def prepare_call(op, signatures, constants):
    """``op``: a loaded ``interpreter.Op``; ``signatures``: value name -> declared (dtype,
    shape); ``constants``: name -> value of const ops. Returns a PreparedCall, or None (use the
    general implementation)."""
    build = _BUILDERS.get(op.type)
    if build is None or op.blocks or len(op.out_sigs) != 1 or op.out_sigs[0] is None:
        return None
    args = {}
    for param, kind, payload in op.inputs:
        if kind == NAME:
            if payload in constants:
                args[param] = _Arg(value=constants[payload])
            else:
                args[param] = _Arg(name=payload, sig=signatures.get(payload))
        elif kind == CONST:
            args[param] = _Arg(value=payload)
        else:
            return None
    spec = build(op.type, args, op.out_sigs)
    return None if spec is None else PreparedCall(*spec)
