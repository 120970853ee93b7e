"""The activations and their backward ops written out, for a format that does not run them
fused (Core AI: its own ``softmax`` / ``gelu`` / ``silu`` ops have no documented accuracy;
these forms are the measured ones, docs/coreai.md). Core ML keeps its fused ones.

* ``softmax`` = ``exp(x - max) / sum``, ``log_softmax`` = ``(x - max) - log(sum)`` (max and
  sum over the axis, dims kept); ``softmax_grad`` = ``y·(dy − Σ dy·y)``,
  ``log_softmax_grad`` = ``dy − exp(y)·Σ dy``;
* ``gelu`` exact as JAX writes it, ``0.5·x·erfc(-x·√½)`` (special.py's erfc; a format's
  native fp16 values ``0.5·x·(1 + erf(x/√2))``: erfc has no accuracy in fp16), or the tanh
  form; ``silu`` = ``x·sigmoid(x)``; their backward ops as ir/activation.py.

Carried fp16 values are computed in fp32 and rounded once (``round_once``).
"""
from __future__ import annotations

import math

from ...ir import DType
from ...ir.ops import register_impl
from .policy import round_once
from .special import erfc

_C = math.sqrt(2.0 / math.pi)


def _keep(b, op, x, axis):
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    return b.reshape(b.add(op, x, axes=(axis,)), shape)


def _parts(b, x, axis):
    s = b.add("sub", x, _keep(b, "reduce_max", x, axis))
    e = b.add("exp", s)
    return s, e, _keep(b, "reduce_sum", e, axis)


@register_impl("decompose", "softmax")
@round_once
def _softmax(b, node, ins):
    _, e, z = _parts(b, ins[0], node.params["axis"])
    return [b.add("div", e, z)]


@register_impl("decompose", "log_softmax")
@round_once
def _log_softmax(b, node, ins):
    s, _, z = _parts(b, ins[0], node.params["axis"])
    return [b.add("sub", s, b.add("log", z))]


@register_impl("decompose", "softmax_grad")
@round_once
def _softmax_grad(b, node, ins):
    y, dy = ins
    dot = _keep(b, "reduce_sum", b.add("mul", dy, y), node.params["axis"])
    return [b.add("mul", y, b.add("sub", dy, dot))]


@register_impl("decompose", "log_softmax_grad")
@round_once
def _log_softmax_grad(b, node, ins):
    y, dy = ins
    total = _keep(b, "reduce_sum", dy, node.params["axis"])
    return [b.add("sub", dy, b.add("mul", b.add("exp", y), total))]


def _half_one_plus(b, x, approximate):
    """(0.5·(1 + t), t): t the tanh of the approximate form, else erf(x/√2)."""
    c = lambda v: b.scalar(v, x)  # noqa: E731
    if approximate:  # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        cube = b.add("mul", b.add("mul", x, x), x)
        t = b.add("tanh", b.add("mul", c(_C), b.add("add", x, b.add("mul", c(0.044715), cube))))
        return b.add("mul", c(0.5), b.add("add", c(1), t)), t
    if x.type.dtype != DType.f16:
        return b.add("mul", c(0.5), erfc(b, b.add("mul", x, c(-1 / math.sqrt(2.0))))), None
    erf = b.add("erf", b.add("mul", x, c(1 / math.sqrt(2.0))))
    return b.add("mul", c(0.5), b.add("add", c(1), erf)), None


@register_impl("decompose", "gelu")
@round_once
def _gelu(b, node, ins):
    return [b.add("mul", ins[0], _half_one_plus(b, ins[0], node.params["approximate"])[0])]


@register_impl("decompose", "gelu_grad")
@round_once
def _gelu_grad(b, node, ins):
    x, dy = ins
    c = lambda v: b.scalar(v, x)  # noqa: E731
    half_1pt, t = _half_one_plus(b, x, node.params["approximate"])
    if node.params["approximate"]:  # 0.5(1+t) + 0.5·x·(1−t²)·√(2/π)·(1 + 3·0.044715·x²)
        d_inner = b.add("mul", c(_C), b.add("add", c(1), b.add("mul", c(3 * 0.044715),
                                                                b.add("mul", x, x))))
        rest = b.add("mul", b.add("mul", b.add("mul", c(0.5), x),
                                  b.add("sub", c(1), b.add("mul", t, t))), d_inner)
    else:  # 0.5·erfc(-x/√2) + x·exp(−x²/2)/√(2π)
        rest = b.add("mul", x, b.add("mul", b.add("exp", b.add("mul", c(-0.5), b.add(
            "mul", x, x))), c(1 / math.sqrt(2 * math.pi))))
    return [b.add("mul", dy, b.add("add", half_1pt, rest))]


@register_impl("decompose", "silu")
@round_once
def _silu(b, node, ins):
    return [b.add("mul", ins[0], b.add("logistic", ins[0]))]


@register_impl("decompose", "silu_grad")
@round_once
def _silu_grad(b, node, ins):
    x, dy = ins  # dy·s·(1 + x·(1 − s))
    s, one = b.add("logistic", x), b.scalar(1, x)
    return [b.add("mul", b.add("mul", dy, s), b.add("add", one, b.add("mul", x,
                                                                        b.add("sub", one, s))))]
