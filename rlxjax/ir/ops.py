"""The RLX op set: one record (``OpDef``) per op.

A record holds what every layer needs to know about an op: its family, a declarative
parameter schema (``Param``), its effects (pure / state / random), whether it is
differentiable, its regions (``Node.regions``), the backward op(s) its VJP rule emits
(``backward``: a fused op's hand-written backward, named where the op is), and type
inference. The layers (frontend, grad transform, constant folding, Core ML lowering) keep
their family modules and register their part into the record with
``register_impl(layer, *ops)``; ``OpDef.impl(layer)`` reads it back. One test
(tests/ir/test_op_records.py) checks the records are complete.

Families (``FAMILIES``; the same names are used in every layer): constant, elementwise,
reduction, shape, linear (defined here), and norm, norm_grad, pool, conv, indexing, random,
control, linalg, activation(_grad), attention(_grad) (each in its own module of rlxjax/ir/). Parameter kinds are in rlxjax/ir/schema.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .schema import (ARRAY, BOOL, DIMS, DTYPE, INT, INT_TRIPLES, INTS, INTS_PAIR, Param, compile_schema,
                     one_of)
from .types import DType, Dyn, TensorType, dtype_from_numpy


class IRTypeError(TypeError):
    """An op was given inputs or parameters that do not type-check."""


InferFn = Callable[[Sequence[TensorType], Mapping], List[TensorType]]

#: Effects an op may have. ``pure``: a deterministic function of its inputs and params
#: (may be folded, merged, removed when unused); ``state``: reads/writes device state;
#: ``random``: a fresh draw per execution (never folded or merged).
EFFECTS = ("pure", "state", "random")

#: The op families, named alike in every layer (frontend rules, VJPs, lowerings, tests).
FAMILIES = ("constant", "elementwise", "reduction", "shape", "linear", "norm", "norm_grad",
            "pool", "conv", "indexing", "random", "control", "linalg", "activation",
            "activation_grad", "attention", "attention_grad")

#: Each format's lowering layer: format -> the layer its lowerings register under.
LOWERINGS = {"coreml": "lower", "coreai": "lower_coreai"}
#: The layers that register an implementation into an op's record: ``vjp`` (the grad
#: transform), ``fold`` (constant folding), ``decompose`` (rlxjax/transforms/legalize/: the
#: op written once in simpler RLX ops, for a format that does not run it natively), and
#: one lowering per format (``LOWERINGS``).
LAYERS = ("vjp", "fold", "decompose") + tuple(LOWERINGS.values())


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str
    infer: InferFn
    arity: Optional[int]  # None: variadic
    params: Mapping[str, Param]  # the parameter schema (rlxjax/ir/schema.py)
    effect: str = "pure"
    differentiable: bool = True  # False: no cotangent flows through it (zero derivative)
    regions: Tuple[str, ...] = ()  # names of the node's regions (Node.regions)
    #: the ops this op's VJP rule emits as its hand-written backward (the rule reads the
    #: names here, so that a backward op's name leads to the op whose gradient it is)
    backward: Tuple[str, ...] = ()
    impls: Dict[str, Callable] = field(default_factory=dict, compare=False, hash=False)
    #: ``params -> None | message``, compiled from ``params`` (schema.compile_schema)
    check_params: Callable = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self):
        if self.check_params is None:
            object.__setattr__(self, "check_params", compile_schema(self.name, self.params))

    @property
    def pure(self) -> bool:
        return self.effect == "pure"

    def impl(self, layer: str) -> Optional[Callable]:
        return self.impls.get(layer)

    def lowering(self, fmt: str) -> Optional[Callable]:
        """Format ``fmt``'s lowering of this op (``LOWERINGS``), or None."""
        return self.impls.get(LOWERINGS[fmt])


OPS: Dict[str, OpDef] = {}


def defop(name: str, family: str, arity: Optional[int], *, params: Mapping[str, Param],
          effect: str = "pure", differentiable: bool = True, regions: Sequence[str] = (),
          backward: Sequence[str] = ()):
    """Decorator: define RLX op ``name`` with ``fn`` as its type inference. ``params`` is
    its parameter schema (``{}`` for none); ``regions`` names the node's regions
    (``Node.regions``, never params); ``backward`` the backward ops its VJP rule emits
    (``OpDef.backward``; tests/ir/test_op_records.py checks each is an op)."""
    if effect not in EFFECTS:
        raise ValueError(f"op {name}: effect {effect!r} is not one of {EFFECTS}")
    if family not in FAMILIES:
        raise ValueError(f"op {name}: family {family!r} is not one of {FAMILIES}")
    if not all(isinstance(v, Param) for v in params.values()):
        raise ValueError(f"op {name}: params must map names to Param")
    if set(regions) & set(params):
        raise ValueError(f"op {name}: regions {tuple(regions)} are not params (Node.regions)")

    def register(fn: InferFn) -> InferFn:
        if name in OPS:
            raise ValueError(f"op {name} defined twice")
        OPS[name] = OpDef(name, family, fn, arity, dict(params), effect, differentiable,
                          tuple(regions), tuple(backward))
        return fn

    return register


def register_impl(layer: str, *ops: str, replace: bool = False):
    """Decorator: register ``fn`` as ``layer``'s implementation of each op in ``ops``
    (``replace``: in place of the one registered, which the new one wraps)."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r} (one of {LAYERS})")

    def register(fn):
        for op in ops:
            try:
                opdef = OPS[op]
            except KeyError:
                raise ValueError(f"{layer} implementation for unknown RLX op {op!r}") from None
            if (layer in opdef.impls) != replace:
                raise ValueError(f"{layer} implementation for {op} "
                                 f"{'defined twice' if not replace else 'to replace is missing'}")
            opdef.impls[layer] = fn
        return fn

    return register


class _LayerView(Mapping):
    """Read-only ``{op name: implementation}`` of one layer, read live from the records."""

    def __init__(self, layer: str):
        self.layer = layer

    def __getitem__(self, op: str) -> Callable:
        fn = OPS[op].impls.get(self.layer) if op in OPS else None
        if fn is None:
            raise KeyError(op)
        return fn

    def __iter__(self):
        return (n for n, d in OPS.items() if self.layer in d.impls)

    def __len__(self) -> int:
        return sum(1 for d in OPS.values() if self.layer in d.impls)

    def __repr__(self) -> str:
        return f"<{self.layer} implementations of {len(self)} RLX ops>"


def impls_of(layer: str) -> Mapping[str, Callable]:
    """``layer``'s implementations by op name (a live, read-only view of the records)."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r} (one of {LAYERS})")
    return _LayerView(layer)


def infer_types(op: str, in_types: Sequence[TensorType], params,
                regions: Optional[Mapping] = None) -> List[TensorType]:
    """Output types of ``op``; an op that declares regions (``OpDef.regions``) gets them
    as a third argument of its ``infer`` (``{name: Graph or tuple of Graphs}``)."""
    try:
        opdef = OPS[op]
    except KeyError:
        raise IRTypeError(f"unknown RLX op {op!r}") from None
    if opdef.arity is not None and len(in_types) != opdef.arity:
        raise IRTypeError(f"{op} takes {opdef.arity} inputs, got {len(in_types)}")
    if getattr(params, "_fits", None) is not opdef:  # immutable Params: checked once per op
        bad = opdef.check_params(params)
        if bad is not None:
            raise IRTypeError(bad)  # params that do not fit the schema
        if hasattr(params, "_fits"):
            object.__setattr__(params, "_fits", opdef)
    if opdef.regions or regions:
        if set(regions or ()) != set(opdef.regions):
            raise IRTypeError(f"{op} takes regions {sorted(opdef.regions)}, "
                              f"got {sorted(regions or ())}")
        return list(opdef.infer(in_types, params, regions))
    return list(opdef.infer(in_types, params))


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise IRTypeError(msg)


# -- constant ------------------------------------------------------------------------
@defop("constant", "constant", 0, params={"value": Param(ARRAY)}, differentiable=False)
def _constant(ts, p):
    v = p["value"]
    return [TensorType(v.shape, dtype_from_numpy(v.dtype))]


# -- elementwise ---------------------------------------------------------------------
def broadcast_shapes(*shapes):
    """numpy broadcasting of static or dynamic shapes (Dyn only matches itself or 1)."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return tuple(first)
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        non1 = {d for d in dims if d != 1}
        if not (len(non1) <= 1):
            raise IRTypeError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
        out.append(non1.pop() if non1 else 1)
    return tuple(out)


FLOAT_UNARY = ("exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "rsqrt",
               "floor", "ceil", "erf", "erfc", "sin", "cos")
NUMERIC_UNARY = ("neg", "abs", "sign", "square")
UNARY = FLOAT_UNARY + NUMERIC_UNARY + ("round", "not", "integer_pow")
ARITH_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "pow")
LOGIC_BINARY = ("and", "or", "xor")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def _unary(name):
    def infer(ts, p):
        (t,) = ts
        if name in FLOAT_UNARY or name == "round":
            if not (t.dtype.is_float):
                raise IRTypeError(f"{name} needs a float input, got {t}")
        elif name in NUMERIC_UNARY or name == "integer_pow":
            if not (t.dtype != DType.bool):
                raise IRTypeError(f"{name} needs a numeric input, got {t}")
        elif name == "not":
            if not (t.dtype == DType.bool or t.dtype.is_int):
                raise IRTypeError(f"not needs bool/int, got {t}")
        if name == "round":
            if not (p.get("method") in ("half_even", "half_away")):
                raise IRTypeError(f"round method {p.get('method')!r}")
        if name == "integer_pow":
            _require(isinstance(p.get("y"), int), "integer_pow needs an int parameter y")
        return [t]

    return infer


def _binary(name):
    def infer(ts, p):
        a, b = ts
        if not (a.dtype == b.dtype):
            raise IRTypeError(f"{name}: dtypes differ ({a} vs {b})")
        shape = broadcast_shapes(a.shape, b.shape)
        if name in COMPARE:
            return [TensorType(shape, DType.bool)]
        if name in LOGIC_BINARY:
            if not (a.dtype == DType.bool or a.dtype.is_int):
                raise IRTypeError(f"{name} needs bool/int, got {a}")
        else:
            if not (a.dtype != DType.bool):
                raise IRTypeError(f"{name} needs numeric inputs, got {a}")
        if name == "pow":
            if not (a.dtype.is_float):
                raise IRTypeError(f"pow needs float inputs, got {a}")
        return [TensorType(shape, a.dtype)]

    return infer


#: ops with a zero derivative everywhere it exists (integer/bool results, or piecewise
#: constant): no cotangent flows through them
ZERO_DERIVATIVE = COMPARE + LOGIC_BINARY + ("not", "sign", "floor", "ceil", "round")
_UNARY_PARAMS = {"round": {"method": Param(one_of("half_even", "half_away"))},
                 "integer_pow": {"y": Param(INT)}}
for _n in UNARY:
    defop(_n, "elementwise", 1, params=_UNARY_PARAMS.get(_n, {}),
          differentiable=_n not in ZERO_DERIVATIVE)(_unary(_n))
for _n in ARITH_BINARY + LOGIC_BINARY + COMPARE:
    defop(_n, "elementwise", 2, params={}, differentiable=_n not in ZERO_DERIVATIVE)(_binary(_n))


@defop("select", "elementwise", 3, params={})
def _select(ts, p):
    """select(pred, on_false, on_true), numpy broadcasting."""
    c, f, t = ts
    if not (c.dtype == DType.bool):
        raise IRTypeError(f"select predicate must be bool, got {c}")
    if not (f.dtype == t.dtype):
        raise IRTypeError(f"select branches differ: {f} vs {t}")
    return [TensorType(broadcast_shapes(c.shape, f.shape, t.shape), f.dtype)]


@defop("clamp", "elementwise", 3, params={})
def _clamp(ts, p):
    """clamp(lo, x, hi) = min(max(x, lo), hi), numpy broadcasting. An op of its own (not
    max/min) because its gradient differs from theirs at the bounds, as in JAX."""
    lo, x, hi = ts
    if not (lo.dtype == x.dtype == hi.dtype):
        raise IRTypeError(f"clamp dtypes differ: {lo}, {x}, {hi}")
    if not (x.dtype != DType.bool):
        raise IRTypeError(f"clamp needs numeric inputs, got {x}")
    return [TensorType(broadcast_shapes(lo.shape, x.shape, hi.shape), x.dtype)]


@defop("convert", "elementwise", 1, params={"dtype": Param(DTYPE)})
def _convert(ts, p):
    (t,) = ts
    _require(isinstance(p.get("dtype"), DType), "convert needs dtype=DType")
    return [t.with_dtype(p["dtype"])]


# -- reduction -----------------------------------------------------------------------
def _axes_ok(t: TensorType, axes) -> None:
    _require(all(0 <= a < t.rank for a in axes) and len(set(axes)) == len(axes),
             f"bad axes {axes} for {t}")


#: a reduction's reduced axes kept (size 1) - set by the decompositions of
#: transforms/legalize/ (after differentiation: no VJP rule reads it), so that a format
#: whose reductions keep dims (MIL's keep_dims, Core AI's) needs no reshape back
KEEP_DIMS = Param(BOOL, required=False, doc="the reduced axes kept, of size 1")


def _reduced(t: TensorType, axes, keep) -> TensorType:
    return t.with_shape(1 if i in axes else d for i, d in enumerate(t.shape)
                        if keep or i not in axes)


for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):

    @defop(_n, "reduction", 1, params={"axes": Param(INTS), "keep_dims": KEEP_DIMS})
    def _reduce(ts, p, _n=_n):
        (t,) = ts
        axes = p["axes"]
        _axes_ok(t, axes)
        if not (t.dtype != DType.bool):
            raise IRTypeError(f"{_n} needs numeric input, got {t}")
        return [_reduced(t, axes, p.get("keep_dims", False))]


for _n in ("argmax", "argmin"):

    @defop(_n, "reduction", 1, params={"axis": Param(INT), "index_dtype": Param(DTYPE),
                                       "keep_dims": KEEP_DIMS}, differentiable=False)
    def _arg(ts, p, _n=_n):
        (t,) = ts
        _axes_ok(t, (p["axis"],))
        _require(p["index_dtype"] == DType.i32, f"{_n} index dtype must be i32")
        _require(t.dtype != DType.bool, f"{_n} needs numeric input, got {t}")
        return [_reduced(t, (p["axis"],), p.get("keep_dims", False)).with_dtype(DType.i32)]


# -- shape ---------------------------------------------------------------------------
def _static_size(shape) -> Optional[int]:
    if any(isinstance(d, Dyn) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


@defop("reshape", "shape", 1, params={"shape": Param(DIMS)})
def _reshape(ts, p):
    (t,) = ts
    shape = p["shape"]
    a, b = _static_size(t.shape), _static_size(shape)
    if not (a is None or b is None or a == b):
        raise IRTypeError(f"cannot reshape {t} to {shape}")
    return [t.with_shape(shape)]


@defop("transpose", "shape", 1, params={"perm": Param(INTS)})
def _transpose(ts, p):
    (t,) = ts
    perm = p["perm"]
    if not (sorted(perm) == list(range(t.rank))):
        raise IRTypeError(f"bad permutation {perm} for {t}")
    return [t.with_shape(t.shape[i] for i in perm)]


@defop("broadcast_in_dim", "shape", 1, params={"shape": Param(DIMS), "dims": Param(INTS)})
def _broadcast_in_dim(ts, p):
    """JAX semantics: operand dim i goes to output dim dims[i] (size equal or 1)."""
    (t,) = ts
    shape, dims = p["shape"], p["dims"]
    if not (len(dims) == t.rank):
        raise IRTypeError(f"broadcast_in_dim dims {dims} vs {t}")
    for i, d in enumerate(dims):
        if not (t.shape[i] in (1, shape[d])):
            raise IRTypeError(f"cannot broadcast {t} to {shape} via {dims}")
    return [t.with_shape(shape)]


@defop("rev", "shape", 1, params={"axes": Param(INTS)})
def _rev(ts, p):
    (t,) = ts
    _axes_ok(t, p["axes"])
    return [t]


@defop("concatenate", "shape", None, params={"axis": Param(INT)})
def _concatenate(ts, p):
    ax = p["axis"]
    _require(len(ts) >= 1, "concatenate needs inputs")
    t0 = ts[0]
    _require(0 <= ax < t0.rank, f"bad concat axis {ax}")
    total = 0
    for t in ts:
        _require(t.dtype == t0.dtype and t.rank == t0.rank, f"concatenate: {t} vs {t0}")
        _require(all(t.shape[i] == t0.shape[i] for i in range(t.rank) if i != ax),
                 f"concatenate: {t} vs {t0} off axis {ax}")
        total += t.shape[ax]
    return [t0.with_shape(total if i == ax else d for i, d in enumerate(t0.shape))]


@defop("slice", "shape", 1,
       params={"start": Param(INTS), "limit": Param(DIMS), "strides": Param(INTS)})
def _slice(ts, p):
    (t,) = ts
    start, limit, strides = p["start"], p["limit"], p["strides"]
    if not (len(start) == len(limit) == len(strides) == t.rank):
        raise IRTypeError(f"slice params vs {t}")
    out = []
    for s, l, st, d in zip(start, limit, strides, t.shape):
        if isinstance(l, Dyn) or isinstance(d, Dyn):  # a flexible axis: only taken whole
            if not (s == 0 and l == d and st == 1):
                raise IRTypeError(f"slice [{s}:{l}:{st}] of flexible dim {d}: only whole")
            out.append(d)
            continue
        if not (0 <= s <= l <= d and st >= 1):
            raise IRTypeError(f"slice [{s}:{l}:{st}] out of range for dim {d}")
        out.append(max(0, -(-(l - s) // st)))
    return [t.with_shape(out)]


@defop("split", "shape", 1, params={"axis": Param(INT), "sizes": Param(INTS)})
def _split(ts, p):
    """lax.split: consecutive pieces of ``sizes`` along ``axis`` (one output each; they
    cover the axis), of a static-shaped x (docs/flexible.md keeps slices there)."""
    (t,) = ts
    ax, sizes = p["axis"], tuple(p["sizes"])
    _require(0 <= ax < t.rank and t.is_static, f"split of {t} along axis {ax}")
    _require(len(sizes) >= 1 and all(n >= 1 for n in sizes) and sum(sizes) == t.shape[ax],
             f"split sizes {sizes} do not cover dim {ax} of {t}")
    return [t.with_shape(n if i == ax else d for i, d in enumerate(t.shape)) for n in sizes]


# -- linear --------------------------------------------------------------------------
@defop("dot_general", "linear", 2,
       params={"contract": Param(INTS_PAIR), "batch": Param(INTS_PAIR),
               "out_dtype": Param(DTYPE, required=False)})
def _dot_general(ts, p):
    """JAX dot_general: output dims = batch, lhs free, rhs free."""
    a, b = ts
    (lc, rc), (lb, rb) = p["contract"], p["batch"]
    if not (a.dtype == b.dtype):
        raise IRTypeError(f"dot_general dtypes differ: {a} vs {b}")
    _require(a.dtype != DType.bool, "dot_general of bool")
    _require(len(lc) == len(rc) and len(lb) == len(rb), "dot_general dims mismatch")
    for i, j in list(zip(lc, rc)) + list(zip(lb, rb)):
        if not (a.shape[i] == b.shape[j]):
            raise IRTypeError(f"dot_general: {a} dim {i} vs {b} dim {j}")
    lfree = [d for i, d in enumerate(a.shape) if i not in lc and i not in lb]
    rfree = [d for i, d in enumerate(b.shape) if i not in rc and i not in rb]
    batch = [a.shape[i] for i in lb]
    out_dtype = p.get("out_dtype") or a.dtype
    return [TensorType(tuple(batch + lfree + rfree), out_dtype)]


@defop("stop_gradient", "elementwise", 1, params={}, differentiable=False)
def _stop_gradient(ts, p):
    """Identity in the forward program; the grad transform sends no cotangent through it."""
    return [ts[0]]


@defop("pad", "shape", 2, params={"config": Param(INT_TRIPLES)})
def _pad(ts, p):
    """lax.pad: [x, padding value (rank 0)], config = ((lo, hi, interior), ...) per dim;
    negative lo/hi remove elements after interior padding."""
    x, v = ts
    _require(v.rank == 0 and v.dtype == x.dtype, f"pad value must be a {x.dtype} scalar, got {v}")
    cfg = p["config"]
    _require(len(cfg) == x.rank, f"pad config {cfg} for {x}")
    out = []
    for (lo, hi, interior), d in zip(cfg, x.shape):
        _require(interior >= 0, f"negative interior padding {interior}")
        if isinstance(d, Dyn):  # a flexible axis (docs/flexible.md): left as it is
            _require(lo == hi == interior == 0, f"pad {cfg} of the flexible dim {d} of {x}")
            out.append(d)
            continue
        n = lo + hi + d + max(0, d - 1) * interior
        _require(n >= 0, f"pad config {cfg} gives a negative size for {x}")
        out.append(n)
    return [x.with_shape(out)]
