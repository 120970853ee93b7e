"""The shared part of the RLX -> Core AI op rules: the lowering context (``Ctx``: constants,
reshapes, small exact compositions every family uses), the rule registry (``rule``) and the
refusal (``unsupported``).

Each rule module (ops_elementwise.py, ops_shape.py, ops_nn.py, control.py, ...) registers
``fn(ctx, node, ins) -> value | [values]`` for the RLX ops it lowers into the op's record
(layer ``LOWERINGS["coreai"]`` of rlxjax/ir/ops.py, next to Core ML's); ops.py dispatches.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Dict, Mapping, Tuple

import numpy as np

from ..errors import JAX_NAMES, UnsupportedPrimitiveError
from ..ir import DType, TensorType
from ..ir import halfcarry, smallint
from ..ir.ops import LOWERINGS, impls_of, register_impl
from ..ir.smallint import SMALL, needs_wrap
from . import ca_private

NP = {DType.f32: np.float32, DType.f16: np.float16, DType.i32: np.int32, DType.bool: np.bool_}

#: RLX op -> rule(ctx, node, ins) returning one Core AI value or a list (one per output):
#: a read-only view of the op records' Core AI lowerings (rlxjax/ir/ops.py ``LOWERINGS``)
RULES: Mapping[str, Callable] = impls_of(LOWERINGS["coreai"])


def rule(*ops: str, replace: bool = False):
    """Decorator: ``fn`` is the Core AI lowering of each op in ``ops``, in the op's record
    (``replace``: in place of the rule registered, which ``fn`` wraps)."""
    return register_impl(LOWERINGS["coreai"], *ops, replace=replace)


def unsupported(node, detail="no Core AI lowering for this RLX op (yet)"):
    return UnsupportedPrimitiveError(JAX_NAMES.get(node.op, node.op), node.source, detail)


#: the dtypes the rules are written for
DTYPES = (DType.f32, DType.f16, DType.i32, DType.bool, DType.i8, DType.u8)
#: int8 / uint8 values are carried as int32 Core AI values holding the same number, wrapped
#: into range after every op that may leave it (rlxjax/ir/smallint.py, as the Core ML
#: lowering does); the wrap relies on Core AI's int32 arithmetic wrapping as two's
#: complement (measured: products beyond 2**31 match JAX's).
#: fp16 values are carried as fp32 Core AI values holding the same number, rounded to fp16
#: after every op that may leave the fp16 values (rlxjax/ir/halfcarry.py: XLA:CPU's own
#: f16 arithmetic); Core AI's cast rounds to nearest even, overflows to inf and keeps fp16
#: subnormals (measured, tests/coreai_format/test_coreai_fp16.py)


#: set while a precision="fp16" / "mixed" program is lowered (``native_f16_values``): its f16
#: values are then Core AI fp16 values, neither carried in fp32 nor rounded (the user asked
#: for fp16 arithmetic, docs/coreai.md)
_NATIVE_F16 = contextvars.ContextVar("rlxjax_coreai_native_f16", default=False)


@contextlib.contextmanager
def native_f16_values(on: bool):
    token = _NATIVE_F16.set(on)
    try:
        yield
    finally:
        _NATIVE_F16.reset(token)


def carried(d: DType) -> DType:
    """The Core AI dtype an RLX value of dtype ``d`` is carried in."""
    if d == DType.f16 and _NATIVE_F16.get():
        return d
    return halfcarry.carried(smallint.carried(d))


def check_type(t: TensorType, node=None, native_f16: bool = False) -> None:
    """Refuse (UnsupportedPrimitiveError) a type the Core AI rules do not take yet: a
    dtype other than f32 / i32 / bool (f16 too in a precision="fp16" or "mixed" program:
    ``native_f16``), or a zero-size tensor (Core AI's compiler rejects them: measured on a
    [1000, 0, 0] operand)."""
    why = None
    if t.dtype not in DTYPES and not (native_f16 and t.dtype == DType.f16):
        why = f"{t.dtype} values are not lowered for Core AI yet (f32, i32 and bool are)"
    elif any(d == 0 for d in t.shape):
        why = f"zero-size tensors ({t}) are not lowered for Core AI yet"
    if why:
        if node is None:
            raise UnsupportedPrimitiveError("dtype" if t.dtype not in DTYPES else "shape",
                                            None, why)
        raise unsupported(node, why)


#: broadcasting elementwise ops whose Core AI rules only combine their inputs elementwise
UNBROADCAST_OPS = frozenset({"add", "sub", "mul", "max", "min", "select"})


class Ctx:
    """The Core AI authoring module (``ca``) and the small patterns the rules share. Values
    carry no shapes the rules read: each rule passes the RLX types it knows."""

    def __init__(self, ca, native_f16: bool = False):
        self.ca = ca
        self.native_f16 = native_f16  # f16 values as Core AI fp16 (precision fp16 / mixed)
        self.loops = 0  # how many counted loops (``trip_count``) the nodes lowered are in
        #: RLX value id -> (the value before its broadcast, the broadcast value), recorded
        #: by broadcast_in_dim's rule
        self.before_broadcast: Dict[int, Tuple[object, object]] = {}
        #: id of a transpose made here -> (it, its input, perm); conv inputs padded here:
        #: (id of the untransposed value, its perm, padding) -> (that value, padded input)
        self.transposed: Dict[int, tuple] = {}
        self.padded: Dict[tuple, tuple] = {}

    def _unbroadcast(self, node, ins):
        """The inputs of a broadcasting elementwise op, each broadcast operand taken
        before its broadcast when another operand has the result's shape: Core AI's
        ``broadcasting_*`` ops broadcast as they read, so the broadcast copy (a relu
        gradient's zeros) is not written and read again (Core AI's compiler drops the
        broadcast once nothing reads it). The same values, the same
        result."""
        shape = tuple(node.outputs[0].type.shape)
        full = [tuple(v.type.shape) == shape and v.id not in self.before_broadcast
                for v in node.inputs]
        if not any(full):
            return ins
        out = []
        for v, x, f in zip(node.inputs, ins, full):
            small, broadcast = self.before_broadcast.get(v.id, (None, None))
            # the very value broadcast here (a region's body may name it by an argument)
            out.append(small if not f and broadcast is x else x)
        return out

    def lower_nodes(self, nodes, env) -> None:
        """Lowers ``nodes`` in order; ``env`` maps RLX value ids to Core AI values."""
        for node in nodes:
            fn = RULES.get(node.op)
            if fn is None:
                raise unsupported(node)
            for v in list(node.inputs) + list(node.outputs):
                check_type(v.type, node, self.native_f16)
            ins = [env[v.id] for v in node.inputs]
            if node.op in UNBROADCAST_OPS:
                ins = self._unbroadcast(node, ins)
            out = fn(self, node, ins)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(outs) != len(node.outputs):
                raise unsupported(node, f"internal: {len(outs)} values for "
                                        f"{len(node.outputs)} outputs")
            for v, o in zip(node.outputs, outs):
                if v.type.dtype in SMALL and needs_wrap(node.op, node.params.get("mode")):
                    o = self.wrap(o, v.type.dtype)
                elif v.type.dtype == DType.f16 and not self.native_f16 and halfcarry.needs_round(
                        node.op, node.inputs[0].type.dtype if node.inputs else None,
                        node.params.get("mode")):
                    o = self.round16(o)
                env[v.id] = o

    # -- constants -------------------------------------------------------------------------
    def const(self, value, dtype=None):
        return ca_private.constant(np.asarray(value, dtype))

    def scalar(self, value, dtype: DType):
        return self.const(value, NP[carried(dtype)])

    def i32(self, values):
        return self.const(np.asarray(values, np.int32).reshape(-1))

    def u32(self, values):
        return self.const(np.asarray(values, np.uint32).reshape(-1))

    def full(self, value, t: TensorType):
        if not t.shape:
            return self.scalar(value, t.dtype)
        return self.broadcast(self.scalar(value, t.dtype), t.shape, t.dtype)

    # -- shapes ----------------------------------------------------------------------------
    @staticmethod
    def shape(v) -> tuple:
        """The static shape of the Core AI value ``v``."""
        return tuple(v.type.shape)

    def reshape(self, x, shape):
        return self.ca.reshape(x, self.i32(shape) if len(shape) else
                               self.const(np.zeros((0,), np.int32)))

    def transpose(self, x, perm):
        perm = list(perm)
        if perm == list(range(len(perm))):
            return x
        out = self.ca.transpose(x, self.u32(perm))
        self.transposed[id(out)] = (out, x, tuple(perm))  # out[i] = x[perm[i]]
        return out

    def source(self, x):
        """(v, perm) with ``x`` = ``v`` transposed by ``perm`` (v not itself a transpose
        made here; perm the identity when x is none)."""
        perm = tuple(range(len(self.shape(x))))
        while id(x) in self.transposed and self.transposed[id(x)][0] is x:
            _, x, p = self.transposed[id(x)]
            perm = tuple(p[i] for i in perm)
        return x, perm

    def broadcast(self, x, shape, dtype: DType):
        """``x`` broadcast to ``shape`` (the result type given: the authoring API infers a
        dynamic one from a constant shape)."""
        return ca_private.typed("broadcast_to", shape, carried(dtype).np.name, input=x,
                                shape=np.asarray(shape, np.int32))

    def gather_along(self, x, idx, axis: int, shape, dtype: DType):
        """take_along_axis(x, idx, axis), ``idx`` of the result's ``shape``."""
        return ca_private.typed("gather_along_axis", shape, carried(dtype).np.name, input=x,
                                indices=idx, axis=np.int32(axis))

    def slice(self, x, start, end, strides=None):
        strides = [1] * len(start) if strides is None else strides
        return self.ca.slice_(x, self.i32(start), self.i32(end), self.i32(strides))

    def iota(self, n: int, axis: int, rank: int, dtype=np.int32):
        """0..n-1 along ``axis`` of a rank-``rank`` tensor (size 1 elsewhere), a constant."""
        shape = [1] * rank
        shape[axis] = n
        return self.const(np.arange(n, dtype=dtype).reshape(shape))

    # -- exact elementwise patterns --------------------------------------------------------
    def where(self, cond, on_true, on_false):
        return self.ca.broadcasting_where(cond, on_true, on_false)

    def widen(self, v, shape, dtype: DType):
        """``v`` broadcast to ``shape`` by an elementwise identity with a splat constant of
        that shape (``x + -0.0`` keeps every float, signed zeros and NaN included; int ``+ 0``;
        bool ``or False``): Core AI's runtime hung on a ``broadcast_to`` (and on a ``where``
        whose operands broadcast along different dims) of a value computed from a loop's
        carry inside the loop (measured: a [1, 1, 2] row of a product with the carry,
        broadcast to [1, 3, 2], never finished); implicit broadcasting against a full-shape
        operand does not hang."""
        if tuple(self.shape(v)) == tuple(shape):
            return v
        if dtype == DType.bool:
            return self.or_(v, self.const(np.zeros(shape, bool)))
        fill = -0.0 if carried(dtype).is_float else 0
        return self.add(v, self.const(np.full(shape, fill, NP[carried(dtype)])))

    def select_in_loop(self, cond, on_true, on_false, dtype: DType):
        """``where`` inside a loop: its operands widened to the result's shape first (a
        rank-0 one stays): see ``widen``."""
        shape = np.broadcast_shapes(*(self.shape(v) for v in (cond, on_true, on_false)))

        def full(v, dt):
            return v if not self.shape(v) else self.widen(v, shape, dt)

        return self.where(full(cond, DType.bool), full(on_true, dtype), full(on_false, dtype))

    def add(self, a, b):
        return self.ca.broadcasting_add(a, b)

    def sub(self, a, b):
        return self.ca.broadcasting_sub(a, b)

    def mul(self, a, b):
        return self.ca.broadcasting_mul(a, b)

    def div(self, a, b):
        return self.ca.broadcasting_divide(a, b)

    def eq(self, a, b):
        return self.ca.broadcasting_equal(a, b)

    def ne(self, a, b):
        return self.ca.broadcasting_not_equal(a, b)

    def gt(self, a, b):
        return self.ca.broadcasting_greater(a, b)

    def lt(self, a, b):
        return self.ca.broadcasting_greater(b, a)

    def or_(self, a, b):
        return self.ca.broadcasting_or(a, b)

    def and_(self, a, b):
        return self.ca.broadcasting_and(a, b)

    def neg(self, x, dtype: DType):
        # x * -1 keeps the sign of zero (0 - x would turn -0 into +0), exact for ints too
        return self.mul(x, self.scalar(-1, dtype))

    def isnan(self, x):
        return self.ne(x, x)

    def cast(self, x, dtype: DType):
        return self.ca.cast(x, ca_private.dtype(carried(dtype).np.name))

    def wrap(self, x, dtype: DType):
        """The int32-carried ``x`` reduced modulo 2**8 into ``dtype``'s range (JAX's
        wrap-around): Core AI's integer ``modulo`` truncates, so a negative remainder is
        lifted by 256."""
        i32 = DType.i32
        shift = 128 if dtype == DType.i8 else 0
        v = self.add(x, self.scalar(shift, i32)) if shift else x
        r = self.ca.broadcasting_modulo(v, self.scalar(256, i32))
        r = self.where(self.lt(r, self.scalar(0, i32)), self.add(r, self.scalar(256, i32)), r)
        return self.sub(r, self.scalar(shift, i32)) if shift else r

    def round16(self, x):
        """The fp32-carried ``x`` rounded to fp16 (nearest even, overflow to inf)."""
        return self.ca.cast(self.ca.cast(x, self.ca.float16), self.ca.float32)

    def reduce(self, kind: str, x, axes, keep_shape=None):
        """``reduce_<kind>`` over ``axes`` (Core AI keeps the dims); reshaped to
        ``keep_shape`` when given. No axes is no reduction: Core AI's reductions take an
        empty axis list as every axis (measured: a batch norm over one element per channel
        normalised the whole tensor)."""
        if not axes:
            return x if keep_shape is None else self.reshape(x, keep_shape)
        v = getattr(self.ca, f"reduce_{kind}")(x, self.i32(sorted(axes)))
        return v if keep_shape is None else self.reshape(v, keep_shape)

    def sum_keep(self, x, axes):
        return self.reduce("sum", x, axes)

    def mean_keep(self, x, axes, shape):
        """The mean over ``axes`` (dims kept): the sum divided by n."""
        n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        return self.div(self.sum_keep(x, axes), self.scalar(n, DType.f32))

    def matmul(self, a, b):
        return self.ca.batch_matmul(a, b)
