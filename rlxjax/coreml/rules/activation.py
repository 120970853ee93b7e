"""Lowering: the fused activations (MIL ``softmax``, ``gelu``, ``silu``) and their
hand-written backward ops (rlxjax/ir/activation.py).

``log_softmax`` has no MIL op; it is ``s − log Σ exp(s)`` with ``s = x − max(x)``
(``reduce_log_sum_exp`` of ``s``, whose largest term is exp(0) = 1, so nothing overflows
and the sum is at least 1): four MIL ops for the six of the decomposed form.
``log(softmax(x))`` would be two, but underflows to -inf where JAX's value is finite.

The gelu backward uses ``1 + erf(x/√2)`` (MIL has no erfc): for x < −3 that is a difference
of nearly equal numbers, and its absolute error (~1e-7 in fp32) is what the derivative
carries there (see docs/numerics.md). The tanh-gelu backward is written with sigmoids
(``_tanh_gelu_grad``), which have no such cancellation.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import Ew, scalar_like


def _reduce_keep(b, op, x, axis):
    """``op`` over ``axis`` with the dim kept (a constant stays a constant: coremltools'
    loader refuses keep_dims on a reduction of a const, see rules/reduction.py)."""
    known = b.known(x)
    if known is not None and op == "reduce_sum":
        return b.const(np.sum(known, axis=axis, keepdims=True, dtype=known.dtype))
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    return b.op(op, TensorType(shape, x.dtype), x=x, axes=np.asarray([axis], np.int32),
                keep_dims=True)


@lowering("softmax")
def _softmax(ctx, node, x):
    return ctx.b.op("softmax", ctx.out_type(node), x=x, axis=np.int32(node.params["axis"]))


@lowering("log_softmax")
def _log_softmax(ctx, node, x):
    b, e, a = ctx.b, Ew(ctx.b), node.params["axis"]
    s = e.binary("sub", x, _reduce_keep(b, "reduce_max", x, a))
    return e.binary("sub", s, _reduce_keep(b, "reduce_log_sum_exp", s, a))


@lowering("gelu")
def _gelu(ctx, node, x):
    mode = "TANH_APPROXIMATION" if node.params["approximate"] else "EXACT"
    return ctx.b.op("gelu", ctx.out_type(node), x=x, mode=mode)


@lowering("silu")
def _silu(ctx, node, x):
    return ctx.b.op("silu", ctx.out_type(node), x=x)


@lowering("softmax_grad")
def _softmax_grad(ctx, node, y, dy):
    """dx = y·(dy − Σ dy·y)."""
    b, e = ctx.b, Ew(ctx.b)
    s = _reduce_keep(b, "reduce_sum", e.binary("mul", dy, y), node.params["axis"])
    return e.binary("mul", y, e.binary("sub", dy, s))


@lowering("log_softmax_grad")
def _log_softmax_grad(ctx, node, y, dy):
    """dx = dy − exp(y)·Σ dy."""
    b, e = ctx.b, Ew(ctx.b)
    s = _reduce_keep(b, "reduce_sum", dy, node.params["axis"])
    return e.binary("sub", dy, e.binary("mul", e.unary("exp", y), s))


@lowering("gelu_grad")
def _gelu_grad(ctx, node, x, dy):
    e, k = Ew(ctx.b), (lambda c: scalar_like(x, c))
    if node.params["approximate"]:
        return _tanh_gelu_grad(ctx.b, x, dy)
    half_dy = e.binary("mul", dy, k(0.5))
    # d/dx x·Φ(x) = Φ(x) + x·φ(x);  2·that = 1 + erf(z) + (2/√π)·z·exp(−z²), z = x/√2
    z = e.binary("mul", x, k(1 / math.sqrt(2.0)))
    gauss = e.unary("exp", e.binary("mul", z, e.binary("mul", x, k(-1 / math.sqrt(2.0)))))
    d2 = e.binary("add", e.binary("add", e.unary("erf", z), k(1.0)),
                  e.binary("mul", e.binary("mul", z, k(2 / math.sqrt(math.pi))), gauss))
    return e.binary("mul", half_dy, d2)


def _tanh_gelu_grad(b, x, dy):
    """tanh-gelu is ½x(1 + tanh(u)) = x·s with s = sigmoid(v), v = 2u = x(2c + 2ac·x²):

        d/dx = s + x·s(1 − s)·w,   w = dv/dx = 2c + 6ac·x²,

    with ``1 − s`` as ``sigmoid(−v)`` (not a difference: it keeps its relative precision
    where s ≈ 1, and s keeps its own where s ≈ 0), and the product ``(s·(1 − s))·x`` formed
    before ``·w`` so that it is 0, not 0·inf, once v saturates. 14 ops for the 15 of
    ``½(1 + t) + ½x(1 − t²)·u'``, and more accurate (bench/activation_accuracy.py, fp32
    against float64): max abs error 1.5e-7 on [-12, 12] (that form 1.2e-6, XLA 3.5e-6),
    and 1.0e-5 relative in the tail x in [-10, -3] (gradient -1e-2 .. -3e-36), where
    ``1 + t`` is a cancellation (that form up to 13× off, XLA 100%). In fp16 x is first
    clipped to [-16, 16] (one op): x² overflows fp16 beyond |x| = 256 (0·inf = NaN in
    either form), and the gradient is 1 (x > 0) or below fp16's smallest subnormal
    (x < 0) already at |x| = 16."""
    e, k = Ew(b), (lambda c: scalar_like(x, c))
    if x.dtype == DType.f16:
        x = b.op("clip", TensorType(x.shape, x.dtype), x=x, alpha=k(-16.0), beta=k(16.0))
    c, a = math.sqrt(2.0 / math.pi), 0.044715
    x2 = e.binary("mul", x, x)
    v = e.binary("mul", x, e.binary("add", e.binary("mul", x2, k(2 * a * c)), k(2 * c)))
    s = e.unary("sigmoid", v)
    r = e.unary("sigmoid", e.binary("mul", v, k(-1.0)))
    w = e.binary("add", e.binary("mul", x2, k(6 * a * c)), k(2 * c))
    d = e.binary("add", s, e.binary("mul", e.binary("mul", e.binary("mul", s, r), x), w))
    return e.binary("mul", dy, d)


@lowering("silu_grad")
def _silu_grad(ctx, node, x, dy):
    """dx = dy·s·(1 + x·(1 − s)), s = sigmoid(x)."""
    e, k = Ew(ctx.b), (lambda c: scalar_like(x, c))
    s = e.unary("sigmoid", x)
    inner = e.binary("add", e.binary("mul", x, e.binary("sub", k(1.0), s)), k(1.0))
    return e.binary("mul", dy, e.binary("mul", s, inner))
