"""Fold: the fused activations and their backward ops (rlxjax/ir/activation.py), evaluated
in float64 and rounded once to the operand's dtype (what the fused MIL ops approximate)."""
from __future__ import annotations

import math

import numpy as np

from ...ir.ops import register_impl

_C = math.sqrt(2.0 / math.pi)


def _special():
    """scipy.special, imported when an activation is first folded: not at ``import rlxjax``
    (~0.15 CPU s of every compile, most of which never folds a gelu or a silu)."""
    from scipy import special  # noqa: PLC0415

    return special


def _f64(*xs):
    return [np.asarray(x, np.float64) for x in xs]


def _round(like, r):
    return np.asarray(r, dtype=like.dtype)


def _softmax64(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@register_impl("fold", "softmax")
def _softmax(p, x):
    return _round(x, _softmax64(*_f64(x), p["axis"]))


@register_impl("fold", "log_softmax")
def _log_softmax(p, x):
    (v,) = _f64(x)
    s = v - np.max(v, axis=p["axis"], keepdims=True)
    return _round(x, s - np.log(np.sum(np.exp(s), axis=p["axis"], keepdims=True)))


def gelu64(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(_C * (x + 0.044715 * x ** 3)))
    return 0.5 * x * _special().erfc(-x / math.sqrt(2.0))


def gelu_grad64(x, approximate):
    if approximate:
        t = np.tanh(_C * (x + 0.044715 * x ** 3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _C * (1.0 + 3 * 0.044715 * x * x)
    return 0.5 * _special().erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(
        2.0 * math.pi)


@register_impl("fold", "gelu")
def _gelu(p, x):
    return _round(x, gelu64(*_f64(x), p["approximate"]))


@register_impl("fold", "silu")
def _silu(p, x):
    (v,) = _f64(x)
    return _round(x, v * _special().expit(v))


@register_impl("fold", "softmax_grad")
def _softmax_grad(p, y, dy):
    v, d = _f64(y, dy)
    return _round(y, v * (d - np.sum(d * v, axis=p["axis"], keepdims=True)))


@register_impl("fold", "log_softmax_grad")
def _log_softmax_grad(p, y, dy):
    v, d = _f64(y, dy)
    return _round(y, d - np.exp(v) * np.sum(d, axis=p["axis"], keepdims=True))


@register_impl("fold", "gelu_grad")
def _gelu_grad(p, x, dy):
    v, d = _f64(x, dy)
    return _round(x, d * gelu_grad64(v, p["approximate"]))


@register_impl("fold", "silu_grad")
def _silu_grad(p, x, dy):
    v, d = _f64(x, dy)
    s = _special().expit(v)
    return _round(x, d * s * (1.0 + v * (1.0 - s)))
