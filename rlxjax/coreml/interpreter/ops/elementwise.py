"""Elementwise ops: binary, unary, cast, select, clip, threshold, activations.

Formulas follow coremltools' value_inference (iOS15 elementwise_binary.py / elementwise_unary.py
/ activation.py, iOS17 overrides) expression for expression, so numpy's promotion rules give the
same intermediate precision; the result is then cast to the dtype MIL's type inference declares.
fp16 inputs are computed by numpy's float16 ufuncs (compute in fp32, round per op): that *is*
the fp16 simulation this backend wants.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .registry import register
from .common import STR_TO_DTYPE, get, out, promote, to_int

def _check_float(x, op):
    if x.dtype.kind != "f":
        raise TypeError(f"{op} expects a float tensor, got {x.dtype}")


# --- binary ---------------------------------------------------------------------------------

# Arithmetic: coremltools applies Python operators to the arrays (operator.mod is Python-style
# remainder with the divisor's sign, floordiv rounds toward -inf); the value is then stored in
# the promoted MIL type, so e.g. int32 real_div truncates the float quotient toward zero.
# ARITH, COMPARE, LOGICAL and UNARY are public: the accelerated path
# (../accelerated/prepared.py) makes the same numpy calls where the declared input types make
# the general checks redundant.
ARITH = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "real_div": operator.truediv,
    "floor_div": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
COMPARE = {
    "equal": np.equal,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}
LOGICAL = {
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


def _binary(name, fn, kind):
    def impl(inputs):
        x, y = np.asarray(inputs["x"]), np.asarray(inputs["y"])
        if kind == "logical":
            if x.dtype.kind != "b" or y.dtype.kind != "b":
                raise TypeError(f"{name} expects bool tensors, got {x.dtype} and {y.dtype}")
            return (out(fn(x, y), np.bool_),)
        res = fn(x, y)
        return (out(res, np.bool_ if kind == "compare" else promote(x.dtype, y.dtype)),)

    impl.__name__ = name
    register(name)(impl)


for _n, _f in ARITH.items():
    _binary(_n, _f, "arith")
for _n, _f in COMPARE.items():
    _binary(_n, _f, "compare")
for _n, _f in LOGICAL.items():
    _binary(_n, _f, "logical")


# --- unary ----------------------------------------------------------------------------------

# name -> (numpy function, int32 allowed).  Output dtype = input dtype.
UNARY = {
    "abs": (np.abs, True),
    "acos": (np.arccos, False),
    "asin": (np.arcsin, False),
    "atan": (np.arctan, False),
    "atanh": (np.arctanh, False),
    "ceil": (np.ceil, False),
    "cos": (np.cos, False),
    "cosh": (np.cosh, False),
    "exp": (np.exp, False),
    "exp2": (np.exp2, True),
    "floor": (np.floor, False),
    "round": (np.round, False),  # coremltools uses np.round: ties to even
    "sign": (np.sign, True),
    "sin": (np.sin, False),
    "sinh": (np.sinh, False),
    "sqrt": (np.sqrt, False),
    "square": (np.square, True),
    "tan": (np.tan, False),
    "tanh": (np.tanh, False),
    # activations without parameters
    "relu": (lambda x: np.maximum(x, 0), False),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), False),
    "softplus": (lambda x: np.log(1 + np.exp(-np.abs(x))) + np.maximum(x, 0), False),
    # silu has no value_inference in coremltools; x * sigmoid(x) is its documented definition.
    "silu": (lambda x: x * (1 / (1 + np.exp(-x))), False),
}


def _unary(name, fn, allow_int):
    def impl(inputs):
        x = np.asarray(inputs["x"])
        if not (x.dtype.kind == "f" or (allow_int and x.dtype == np.int32)):
            raise TypeError(f"{name} does not accept dtype {x.dtype}")
        return (out(fn(x), x.dtype),)

    impl.__name__ = name
    register(name)(impl)


for _n, (_f, _i) in UNARY.items():
    _unary(_n, _f, _i)


# math.erf element by element in float64 (what coremltools' np.vectorize(math.erf) does); numpy
# has no erf and the reference should not depend on scipy.
_erf64 = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    return np.asarray(_erf64(np.asarray(x, dtype=np.float64)), dtype=np.float64)


@register("erf")
def erf(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "erf")
    return (out(_erf(x), x.dtype),)


def _eps(inputs, x, default):
    # Default epsilon is a scalar of x's dtype (iOS15); iOS17 allows an fp32 epsilon with fp16 x,
    # in which case numpy promotes the sum to fp32 exactly as coremltools' formula does.
    eps = inputs.get("epsilon")
    return x.dtype.type(default) if eps is None else np.asarray(eps)


@register("inverse")
def inverse(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "inverse")
    return (out(np.reciprocal(x + _eps(inputs, x, 1e-4)), x.dtype),)


@register("log")
def log(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "log")
    return (out(np.log(x + _eps(inputs, x, 1e-45)), x.dtype),)


@register("rsqrt")
def rsqrt(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "rsqrt")
    return (out(1.0 / np.sqrt(x + _eps(inputs, x, 1e-12)), x.dtype),)


@register("logical_not")
def logical_not(inputs):
    x = np.asarray(inputs["x"])
    if x.dtype.kind != "b":
        raise TypeError(f"logical_not expects bool, got {x.dtype}")
    return (out(np.logical_not(x), np.bool_),)


@register("clip")
def clip(inputs):
    x = np.asarray(inputs["x"])
    res = np.minimum(np.maximum(x, inputs["alpha"]), inputs["beta"])
    return (out(res, x.dtype),)


@register("threshold")
def threshold(inputs):
    x = np.asarray(inputs["x"])
    return (out(np.maximum(x, inputs["alpha"]), x.dtype),)


@register("cast")
def cast(inputs):
    x = np.asarray(inputs["x"])
    name = inputs["dtype"]
    if name not in STR_TO_DTYPE:
        raise ValueError(f"unsupported cast dtype {name!r}")
    # numpy astype: float -> int truncates toward zero, like coremltools' value_inference.
    return (x.astype(STR_TO_DTYPE[name]),)


@register("select")
def select(inputs):
    cond, a, b = (np.asarray(inputs[k]) for k in ("cond", "a", "b"))
    if cond.dtype.kind != "b":
        raise TypeError(f"select's cond must be bool, got {cond.dtype}")
    return (out(np.where(cond, a, b), promote(a.dtype, b.dtype)),)


# --- activations with parameters -------------------------------------------------------------

@register("softmax")
def softmax(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "softmax")
    axis = to_int(get(inputs, "axis", -1))
    temp = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (out(temp / np.sum(temp, axis=axis, keepdims=True), x.dtype),)


_gelu_exact = np.frompyfunc(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))), 1, 1)


@register("gelu")
def gelu(inputs):
    x = np.asarray(inputs["x"])
    _check_float(x, "gelu")
    mode = get(inputs, "mode", "EXACT")
    if mode == "TANH_APPROXIMATION":
        # np.sqrt(2 / np.pi) is a float64 numpy scalar: numpy evaluates this in float64, as
        # coremltools does; the result is rounded to x's dtype once.
        a = np.sqrt(2 / np.pi) * (x + 0.044715 * np.power(x, 3))
        res = 0.5 * x * (1 + np.tanh(a))
    elif mode == "SIGMOID_APPROXIMATION":
        res = x * (1 / (1 + np.exp(-(1.702 * x))))
    elif mode == "EXACT":
        res = np.asarray(_gelu_exact(x.astype(np.float64)), dtype=np.float64)
    else:
        raise ValueError(f"unknown gelu mode {mode!r}")
    return (out(res, x.dtype),)


@register("scaled_tanh")
def scaled_tanh(inputs):
    """``alpha · tanh(beta · x)``, as coremltools' value_inference writes it (iOS17: alpha
    and beta may be fp32 with fp16 x; numpy then computes in fp32, rounded once)."""
    x = np.asarray(inputs["x"])
    _check_float(x, "scaled_tanh")
    alpha, beta = np.asarray(inputs["alpha"]), np.asarray(inputs["beta"])
    return (out(alpha * np.tanh(x * beta), x.dtype),)
