"""A flexible *range* on Core AI (docs/flexible.md, docs/coreai.md): one Core AI function
whose inputs have dynamic (``?``) dims, the shapes that depend on them computed in the
program.

A flexible program's RLX graph carries its flexible dims as ``ir.Dyn`` (a symbol, or an
expression of symbols in JAX's syntax). ``DynCtx`` is the lowering context (ops_base.py
``Ctx``) for such a graph: each symbol's size is read once from the runtime shape of the
first function input that has it (``get_shape``, one ``slice``), an expression is computed
from those with Core AI int32 ops, and the shape-building patterns the rules share -
``reshape`` (a target shape), ``broadcast`` (a broadcast's shape), ``slice`` (its end),
``iota`` (a ``range``), ``mean_keep`` (its divisor) - take a runtime shape vector where a
dim is dynamic, with the result type declared (``?`` for a dynamic dim). A static shape
takes the static path unchanged.

Only the ops of ``DYNAMIC_OPS`` (elementwise rules read no shape; the shape ones measured
against JAX on the runtime: tests/coreai_format/test_coreai_range.py) may touch a dynamic
dim; any other is refused by name, saying to list the sizes instead (enumerated sizes: one
static function per size, coreai/flexible.py).
"""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

from ..ir import DType, Dyn
from ..ir.flexible import eval_dim, parse_dim
from . import ca_private
from .ops_base import Ctx, carried, rule, unsupported

#: RLX ops whose Core AI rules take dynamic dims (the elementwise ones read no shape;
#: the shape ones build their shapes through ``DynCtx``); the rest are refused by name
DYNAMIC_OPS = frozenset({
    # elementwise (no shape read)
    "add", "sub", "mul", "div", "max", "min", "pow", "rem", "exp", "log", "tanh",
    "logistic", "sqrt", "rsqrt", "sin", "cos", "abs", "neg", "square", "sign", "floor",
    "ceil", "round", "log1p", "expm1", "erf", "clamp", "integer_pow", "select", "convert",
    "stop_gradient", "and", "or", "xor", "not", "eq", "ne", "gt", "lt", "ge", "le",
    "reduce_precision",
    # shapes, reductions, matmul
    "reshape", "transpose", "broadcast_in_dim", "dot_general", "reduce_sum", "reduce_max",
    "reduce_min", "reduce_prod", "concatenate", "slice", "split", "dim_size", "cumsum",
})
#: of those, the ops that need more than dynamic dims elsewhere (``_refusal``)
_STATIC_AXIS = {"concatenate": "axis", "cumsum": "axis"}

_DTYPE_NAMES = ("float32", "float16", "int32", "bool")


def has_dyn(shape) -> bool:
    return any(isinstance(d, Dyn) for d in shape)


def io_shape(shape) -> tuple:
    """A Core AI type's shape: -1 for a dynamic dim."""
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def prod(dims: Sequence) -> object:
    """The product of ``dims``: an int when every dim is static, else a ``Dyn`` of the
    product's expression (``DynCtx`` computes it at run time)."""
    if not has_dyn(dims):
        return int(np.prod(dims, dtype=np.int64))
    static = int(np.prod([d for d in dims if isinstance(d, int)], dtype=np.int64))
    names = [f"({d.name})" for d in dims if isinstance(d, Dyn)]
    return Dyn("*".join(([str(static)] if static != 1 else []) + names))


def _refusal(node) -> str:
    """Why ``node`` cannot take its dynamic dims on Core AI, or '' when it can."""
    if node.regions:
        return (f"{node.op} with a dynamic dim in its values is not lowered for Core AI "
                "(control flow takes static shapes)")
    if node.op not in DYNAMIC_OPS:
        return f"{node.op} is not lowered for Core AI with a dynamic dim"
    key = _STATIC_AXIS.get(node.op)
    if key is not None:
        t = node.inputs[0].type
        if isinstance(t.shape[node.params[key] % max(t.rank, 1)], Dyn):
            if node.op == "cumsum" and node.inputs[0].type.dtype.is_float:
                return ""
            return (f"{node.op} along a dynamic axis is not lowered for Core AI"
                    + (" (an integer cumsum's exact composition needs the axis' size)"
                       if node.op == "cumsum" else ""))
    return ""


class DynCtx(Ctx):
    """``Ctx`` for a graph whose inputs have dynamic dims: ``bind`` gives the function's
    input values, each symbol is read from the first one that has it."""

    def __init__(self, ca, native_f16: bool = False):
        super().__init__(ca, native_f16)
        self._sources: Dict[str, tuple] = {}   # symbol -> (input value, axis)
        self._values: Dict[str, object] = {}   # dim expression -> its int32 [1] value
        self._ones: set = set()                # RLX value ids of int32 ones (``_note_ones``)

    def bind(self, inputs) -> None:
        """``inputs``: (RLX type, Core AI value) of the function's inputs, in order."""
        for t, v in inputs:
            for axis, d in enumerate(t.shape):
                if isinstance(d, Dyn):
                    self._sources.setdefault(d.name, (v, axis))

    # -- dims ------------------------------------------------------------------------------
    def dim(self, d) -> object:
        """The int32 [1] value of dim ``d`` (an int: a constant)."""
        if isinstance(d, int):
            return self.i32([d])
        if d.name not in self._values:
            self._values[d.name] = eval_dim(parse_dim(d.name), self._symbol,
                                            lambda c: self.i32([c]), self._arith)
        return self._values[d.name]

    def _symbol(self, name: str):
        if name not in self._sources:
            raise unsupported(_Named("dim_size"), f"the flexible size '{name}' is not the "
                              "size of any input's dim: Core AI cannot read it")
        if name not in self._values:
            v, axis = self._sources[name]
            shape = self.ca.cast(self.ca.get_shape(v), self.ca.int32)
            self._values[name] = self.ca.slice_(shape, self.i32([axis]), self.i32([axis + 1]),
                                                self.i32([1]))
        return self._values[name]

    def _arith(self, op: str, a, b):
        ca = self.ca
        fn = {"add": ca.broadcasting_add, "sub": ca.broadcasting_sub,
              "mul": ca.broadcasting_mul, "floordiv": ca.broadcasting_floor_divide,
              "mod": ca.broadcasting_modulo, "max": ca.broadcasting_maximum,
              "min": ca.broadcasting_minimum}[op]
        return fn(a, b)

    def shape_vector(self, shape):
        """int32 [rank]: ``shape`` at run time (static runs as one constant each)."""
        parts, run = [], []
        for d in shape:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                parts.append(self.i32(run))
                run = []
            parts.append(self.dim(d))
        if run:
            parts.append(self.i32(run))
        return parts[0] if len(parts) == 1 else self.ca.concat(self.const(np.int32(0)), parts)

    @staticmethod
    def _dtype_name(x) -> str:
        dt = x.type.dtype
        return next(n for n in _DTYPE_NAMES if ca_private.dtype(n) == dt)

    # -- the shape patterns (ops_base.py Ctx) ----------------------------------------------
    def reshape(self, x, shape):
        if not has_dyn(shape):
            return super().reshape(x, shape)
        return ca_private.typed("reshape", io_shape(shape), self._dtype_name(x), input=x,
                                new_shape=self.shape_vector(shape))

    def broadcast(self, x, shape, dtype: DType):
        if not has_dyn(shape):
            return super().broadcast(x, shape, dtype)
        vec = self.ca.cast(self.shape_vector(shape), self.ca.uint32)
        return ca_private.typed("broadcast_to", io_shape(shape), carried(dtype).np.name,
                                input=x, shape=vec)

    def slice(self, x, start, end, strides=None):
        if not has_dyn(end):
            return super().slice(x, start, end, strides)
        strides = [1] * len(start) if strides is None else list(strides)
        out = []
        for s, e, k in zip(start, end, strides):
            if isinstance(e, Dyn):
                if (s, k) != (0, 1):  # the frontend slices a flexible axis whole only
                    raise unsupported(_Named("slice"), "a slice of part of a dynamic axis is "
                                      "not lowered for Core AI")
                out.append(e)
            else:
                out.append(max(0, -(-(e - s) // k)))
        return ca_private.typed("slice", io_shape(out), self._dtype_name(x), input=x,
                                start_indices=self.i32(start),
                                end_indices=self.shape_vector(end), strides=self.i32(strides))

    def iota(self, n, axis: int, rank: int, dtype=np.int32):
        if isinstance(n, int):
            return super().iota(n, axis, rank, dtype)
        if np.dtype(dtype) != np.int32:
            raise unsupported(_Named("iota"), f"a {np.dtype(dtype)} iota of a dynamic length")
        stop = self.reshape(self.dim(n), ())
        ramp = self.ca.range_(self.const(np.int32(0)), stop, self.const(np.int32(1)))
        shape = [1] * rank
        shape[axis] = n
        return self.reshape(ramp, shape)

    def mean_keep(self, x, axes, shape):
        n = prod([shape[a] for a in axes])
        if isinstance(n, int):
            return super().mean_keep(x, axes, shape)
        count = self.cast(self.reshape(self.dim(n), ()), DType.f32)
        return self.div(self.sum_keep(x, axes), count)

    # -- a running count (a flexible iota, frontend/rules/shape.py) ------------------------
    def _note_ones(self, node) -> None:
        """Record int32 values known to be all ones: a constant of ones, its broadcasts."""
        if node.op == "constant":
            v = np.asarray(node.params["value"])
            if v.dtype == np.int32 and v.size and np.all(v == 1):
                self._ones.add(node.outputs[0].id)
        elif node.op == "broadcast_in_dim" and node.inputs[0].id in self._ones:
            self._ones.add(node.outputs[0].id)

    def _count(self, node):
        """A forward int32 cumsum of ones along a dynamic axis: 1, 2, .., n (a ``range``),
        broadcast to the result - exact at any n (the general integer cumsum's composition
        needs the axis' size, ops_shape.py)."""
        t, axis = node.outputs[0].type, node.params["axis"]
        ramp = self.add(self.iota(t.shape[axis], axis, t.rank), self.scalar(1, DType.i32))
        return self.broadcast(ramp, t.shape, DType.i32)

    def _is_count(self, node) -> bool:
        return (node.op == "cumsum" and not node.params["reverse"]
                and node.inputs[0].id in self._ones and node.inputs[0].type.dtype == DType.i32
                and isinstance(node.inputs[0].type.shape[node.params["axis"]], Dyn))

    # -- the refusal -----------------------------------------------------------------------
    def lower_nodes(self, nodes, env) -> None:
        for node in nodes:
            self._note_ones(node)
            if self._is_count(node):
                env[node.outputs[0].id] = self._count(node)
                continue
            if any(not v.type.is_static for v in list(node.inputs) + list(node.outputs)):
                why = _refusal(node)
                if why:
                    raise unsupported(node, why + ": a flexible range compiles to one "
                                      "function with dynamic dims, which this op cannot "
                                      "take; list the sizes instead (enumerated, e.g. "
                                      "flexible={'x': {0: [1, 8, 64]}}: one static function "
                                      "per size, docs/flexible.md)")
            super().lower_nodes([node], env)


class _Named:
    """Stands for a node in ``unsupported`` where a pattern, not a node, refuses."""

    def __init__(self, op: str):
        self.op, self.source = op, None


@rule("dim_size")
def _dim_size(ctx, node, ins):
    """A flexible dim's size (JAX's ``dim_as_value``: a mean's divisor) as int32 rank 0."""
    if not isinstance(ctx, DynCtx):
        raise unsupported(node, "internal: a dim_size outside a program with dynamic dims")
    return ctx.reshape(ctx.dim(Dyn(node.params["dim"])), ())
