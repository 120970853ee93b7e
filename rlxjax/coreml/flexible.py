"""Lowering of flexible dims: Core ML flexible inputs (docs/flexible.md).

A program input whose RLX type has ``Dyn`` dims becomes a MIL function input with unknown
dims (``Dimension.unknown``) and a model-description feature with a ``shapeRange``
(``RangeDim`` bounds; upper -1 when unbounded). Every symbol is read once, at the top of
the program, from the runtime shape of the first input that has it (``shape`` +
``slice_by_index``); a dim expression ('64*b') is computed from those with MIL integer ops.

Only the ops below look at dim sizes where a static program has constants; they get a
runtime-shape lowering here (``FLEXIBLE``). Every other op lowers as usual, its MIL op
taking whatever shape arrives; an op whose usual lowering needs a dim's size (a ``Dyn``
cannot become an int) is refused with ``DynamicShapeError`` naming the op, the flexible
axis and the user's line. The static path never reaches this module.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from coremltools.proto import FeatureTypes_pb2

from ..errors import DynamicShapeError, RlxError, op_label
from ..ir import DType, Dyn, TensorType
from ..ir.flexible import eval_dim, parse_dim
from .registry import lowering

I32 = DType.i32
_ARITH = {"add": "add", "sub": "sub", "mul": "mul", "floordiv": "floor_div", "mod": "mod",
          "max": "maximum", "min": "minimum"}


class FlexDims:
    """The runtime values of a program's symbols, as MIL int32[1] vars."""

    def __init__(self, b):
        self.b = b
        self.sources: Dict[str, Tuple[object, int]] = {}  # symbol -> (input var, axis)
        self.symbols: Dict[str, object] = {}
        self._cache: Dict[tuple, object] = {}

    def add_input(self, var, t: TensorType) -> None:
        for axis, d in enumerate(t.shape):
            if isinstance(d, Dyn) and d.name not in self.sources:
                self.sources[d.name] = (var, axis)

    def emit_symbols(self) -> None:
        """Read every symbol's size (at the top: visible in every nested block)."""
        b = self.b
        shapes = {}
        for name, (var, axis) in self.sources.items():
            shp = shapes.get(id(var))
            if shp is None:
                shp = shapes[id(var)] = b.op("shape", TensorType((var.type.rank,), I32), x=var)
            self.symbols[name] = b.op("slice_by_index", TensorType((1,), I32), x=shp,
                                      begin=np.asarray([axis], np.int32),
                                      end=np.asarray([axis + 1], np.int32))

    def dim(self, d, where: str = ""):
        """int32[1] var of the size of dim ``d`` (int or Dyn)."""
        b = self.b
        if not isinstance(d, Dyn):
            return b.const(np.asarray([d], np.int32))
        key = (id(b.ops), d.name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit

        def symbol(name):
            if name not in self.symbols:
                raise DynamicShapeError(
                    f"the size '{name}'{where} is no dimension of a program input: a flexible "
                    "size must come from an input's shape (jax.export.symbolic_shape)")
            return self.symbols[name]

        def arith(op, x, y):
            return b.op(_ARITH[op], TensorType((1,), I32), x=x, y=y)

        v = eval_dim(parse_dim(d.name), symbol,
                     lambda k: b.const(np.asarray([k], np.int32)), arith)
        self._cache[key] = v
        return v

    def shape(self, shape, where: str = ""):
        """int32[rank] var of ``shape`` (a const when static)."""
        if all(not isinstance(d, Dyn) for d in shape):
            return self.b.const(np.asarray(shape, np.int32))
        parts, run = [], []
        for d in shape:
            if isinstance(d, Dyn):
                if run:
                    parts.append(self.b.const(np.asarray(run, np.int32)))
                    run = []
                parts.append(self.dim(d, where))
            else:
                run.append(int(d))
        if run:
            parts.append(self.b.const(np.asarray(run, np.int32)))
        if len(parts) == 1:
            return parts[0]
        return self.b.op("concat", TensorType((len(shape),), I32), values=parts,
                         axis=np.int32(0), interleave=False)

    def reshape(self, x, shape, where: str = ""):
        """``x`` reshaped to ``shape`` (ints and Dyn): one Dyn is MIL's -1, more a
        runtime shape."""
        shape = tuple(shape)
        t = TensorType(shape, x.dtype)
        if tuple(x.shape) == shape:
            return x
        dyn = [d for d in shape if isinstance(d, Dyn)]
        if len(dyn) == 1:
            const = np.asarray([-1 if isinstance(d, Dyn) else d for d in shape], np.int32)
            return self.b.op("reshape", t, x=x, shape=const)
        return self.b.op("reshape", t, x=x, shape=self.shape(shape, where))


# -- runtime-shape lowerings of the ops that read dim sizes --------------------------------
def _where(node) -> str:
    op = op_label(node.op)
    return f" (in {op} at {node.source})" if node.source else f" (in {op})"


@lowering("dim_size")
def _dim_size(ctx, node):
    if ctx.flex is None:
        raise flexible_error(node, "the program has no flexible inputs to read it from")
    v = ctx.flex.dim(Dyn(node.params["dim"]), _where(node))
    return ctx.b.op("reshape", TensorType((), I32), x=v, shape=np.zeros((0,), np.int32))


def _reshape(ctx, node, x):
    return ctx.flex.reshape(x, node.params["shape"], _where(node))


def _broadcast_in_dim(ctx, node, x):
    shape, dims = node.params["shape"], node.params["dims"]
    placed = [1] * len(shape)
    for i, d in enumerate(dims):
        placed[d] = x.shape[i]
    y = ctx.flex.reshape(x, placed, _where(node))
    reps = [1 if p == s else s for s, p in zip(shape, placed)]  # p is 1 where they differ
    if all(r == 1 for r in reps):
        return y
    if all(isinstance(r, int) for r in reps):
        rep = np.asarray(reps, np.int32)
    else:
        rep = ctx.flex.shape(reps, _where(node))
    return ctx.b.op("tile", ctx.out_type(node), x=y, reps=rep)


def _slice(ctx, node, x):
    p = node.params
    begin, end = list(p["start"]), list(p["limit"])
    end_mask = [isinstance(e, Dyn) and e == x.shape[i] for i, e in enumerate(end)]
    end = [0 if m else e for e, m in zip(end, end_mask)]
    if any(isinstance(d, Dyn) for d in begin + end):
        raise DynamicShapeError(
            f"slice{_where(node)} starts or ends at a flexible size ({begin} : {p['limit']}): "
            "Core ML slices a flexible axis only whole; slice it before making it flexible, "
            "or keep that axis static.")
    return ctx.b.op("slice_by_index", ctx.out_type(node), x=x,
                    begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                    stride=np.asarray(p["strides"], np.int32),
                    end_mask=np.asarray(end_mask, bool))


def _size(dims):
    """The size of a group of dims (a product): an int, or a Dyn of the product's expression."""
    if len(dims) == 1:
        return dims[0]
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims, dtype=np.int64))
    return Dyn("*".join(f"({d.name})" if isinstance(d, Dyn) else str(d) for d in dims))


def _operand(ctx, x, batch, free, contract, free_first):
    """rules/linear.py's ``_operand`` with flexible dims: x as [batch..., F, C] (free_first)
    or [batch..., C, F], or with matmul's transpose flag."""
    from .rules.common import transpose

    bshape = [x.shape[d] for d in batch]
    want = list(batch) + (list(free) + list(contract) if free_first else list(contract) + list(free))
    alt = list(batch) + (list(contract) + list(free) if free_first else list(free) + list(contract))
    flipped = want != list(range(x.type.rank)) and alt == list(range(x.type.rank))
    y = transpose(ctx.b, x, alt if flipped else want)
    f, c = _size([x.shape[d] for d in free]), _size([x.shape[d] for d in contract])
    inner = [f, c] if free_first != flipped else [c, f]
    return ctx.flex.reshape(y, bshape + inner), flipped


def _dot_general(ctx, node, a, b):
    """rules/linear.py's dot_general with flexible dims (its nd form when that fits)."""
    from .rules.linear import matmul_nd, nd_form

    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lf = [d for d in range(a.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(b.type.rank) if d not in rc and d not in rb]
    tx = nd_form(a.type.rank, lb, lf, lc, rf)
    if tx is not None:
        y, ty = _operand(ctx, b, rb, rf, rc, free_first=False)
        return matmul_nd(ctx.b, a, y, tx, ty, len(lb), len(lf), ctx.out_type(node),
                         lambda v, s: ctx.flex.reshape(v, s, _where(node)), _size)
    x, tx = _operand(ctx, a, lb, lf, lc, free_first=True)
    y, ty = _operand(ctx, b, rb, rf, rc, free_first=False)
    batch = [a.shape[d] for d in lb]
    m, n = _size([a.shape[d] for d in lf] or [1]), _size([b.shape[d] for d in rf] or [1])
    out = ctx.b.op("matmul", TensorType(tuple(batch + [m, n]), ctx.out_type(node).dtype),
                   x=x, y=y, transpose_x=tx, transpose_y=ty)
    return ctx.flex.reshape(out, ctx.out_type(node).shape, _where(node))


def _select(ctx, node, pred, on_false, on_true):
    """rules/elementwise.py's select, its first branch tiled to a flexible shape with
    runtime reps where only the predicate carries the full shape."""
    from ..ir import broadcast_shapes
    from .rules.common import select

    t = ctx.out_type(node)
    if broadcast_shapes(on_true.shape, on_false.shape) != tuple(t.shape):
        full = (1,) * (t.rank - on_true.type.rank) + tuple(on_true.shape)
        y = ctx.flex.reshape(on_true, full, _where(node))
        reps = [1 if s == d else d for d, s in zip(t.shape, full)]
        rep = (np.asarray(reps, np.int32) if all(isinstance(r, int) for r in reps)
               else ctx.flex.shape(reps, _where(node)))
        on_true = ctx.b.op("tile", t, x=y, reps=rep)
    return select(ctx.b, t, pred, on_true, on_false)


def _gather_nd(ctx, node, x, idx):
    """rules/indexing.py's gather_nd on indices with flexible (batch) dims: MIL's gather /
    gather_nd take the indices at their runtime shape; the depth-1 index is dropped with
    a -1 reshape (or squeeze) instead of a constant shape."""
    from .rules.common import bool_as_int32, restore_bool

    b, t = ctx.b, ctx.out_type(node)
    xi = bool_as_int32(b, x)
    if idx.shape[-1] == 1 and idx.type.rank >= 2:
        flat = ctx.flex.reshape(idx, idx.shape[:-1], _where(node)) if sum(
            isinstance(d, Dyn) for d in idx.shape) <= 1 else b.op(
            "squeeze", TensorType(tuple(idx.shape[:-1]), idx.dtype), x=idx,
            axes=np.asarray([-1], np.int32))
        y = b.op("gather", t.with_dtype(xi.dtype), x=xi, indices=flat, axis=np.int32(0))
    else:
        y = b.op("gather_nd", t.with_dtype(xi.dtype), x=xi, indices=idx)
    return restore_bool(b, y, t.dtype)


FLEXIBLE = {"select": _select, "gather_nd": _gather_nd, "reshape": _reshape, "broadcast_in_dim": _broadcast_in_dim,
            "slice": _slice, "dot_general": _dot_general}


def lower_flexible(ctx, node, fn, ins):
    """Lower ``node`` (some of whose types have flexible dims): the runtime-shape lowering
    if it has one, else its usual lowering, refused when that needs a flexible dim's size."""
    own = FLEXIBLE.get(node.op)
    if own is not None:
        return own(ctx, node, *ins)
    try:
        return fn(ctx, node, *ins)
    except RlxError:  # says what is wrong already
        raise
    except (TypeError, ValueError):  # a Dyn met int arithmetic or a constant shape: the
        # Python message ("int() argument must be ... not 'Dyn'") says nothing to the user
        raise flexible_error(node) from None


def flexible_error(node, detail: str = "") -> DynamicShapeError:
    axes = []
    for v in list(node.inputs) + list(node.outputs):
        axes += [f"axis {i} ('{d.name}') of {v.type}" for i, d in enumerate(v.type.shape)
                 if isinstance(d, Dyn)]
    where = f" at {node.source}" if node.source else ""
    return DynamicShapeError(
        f"{op_label(node.op)}{where} cannot be lowered with a flexible dimension ({axes[0] if axes else '?'}"
        f"): its Core ML lowering needs that size at compile time{f' ({detail})' if detail else ''}. "
        "Keep that axis static (a concrete size, or enumerated sizes: one program each), or "
        "restructure so the op does not depend on it.")


# -- the model description -------------------------------------------------------------------
def describe_flexible(arr: FeatureTypes_pb2.ArrayFeatureType, shape, bounds) -> None:
    """A flexible input's ``shapeRange`` (default shape: each range's lower bound) or a
    flexible output's (no fixed shape)."""
    del arr.shape[:]
    if bounds is None:  # an output: its shape is whatever the inputs make it
        return
    for d, bd in zip(shape, bounds):
        lo, hi = (bd if bd else (1, -1)) if isinstance(d, str) else (d, d)
        arr.shape.append(lo)
        arr.shapeRange.sizeRanges.add(lowerBound=lo, upperBound=hi)
