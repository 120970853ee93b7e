"""The activation family of RLX ops (fused forward activations) and activation_grad (their
hand-written backward).

Forward ops, recognised in plain JAX code by transforms/recognize_activations.py:

  softmax      [x]   axis            exp(x - max) / sum(exp(x - max)) along ``axis``
  log_softmax  [x]   axis            x - max - log(sum(exp(x - max))) along ``axis``
  gelu         [x]   approximate     x·Φ(x) (erf), or JAX's tanh approximation
  silu         [x]                   x·sigmoid(x)

Backward ops (inputs: what the formula needs from the forward, then the cotangent ``dy``):

  softmax_grad      [y, dy]  axis          dx = y·(dy − Σ dy·y)        (y: the saved output)
  log_softmax_grad  [y, dy]  axis          dx = dy − exp(y)·Σ dy       (y: the saved output)
  gelu_grad         [x, dy]  approximate   dx = dy·gelu'(x)
  silu_grad         [x, dy]                dx = dy·s·(1 + x·(1 − s)),  s = sigmoid(x)
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import BOOL, INT, Param

PARAMS = {
    "softmax": {"axis": Param(INT)},
    "log_softmax": {"axis": Param(INT)},
    "gelu": {"approximate": Param(BOOL)},
    "silu": {},
}
#: each forward activation's backward op (its record's ``backward``), which its VJP rule
#: (transforms/vjp/activation.py) emits
BACKWARD = {"softmax": "softmax_grad", "log_softmax": "log_softmax_grad", "gelu": "gelu_grad",
            "silu": "silu_grad"}
GRAD_PARAMS = {BACKWARD[k]: v for k, v in PARAMS.items()}


def _float(t, op):
    _require(t.dtype.is_float, f"{op} needs a float input, got {t}")


def _axis(t, p, op):
    _require(t.rank >= 1 and 0 <= p["axis"] < t.rank, f"{op}: axis {p['axis']} for {t}")


for _name in ("softmax", "log_softmax"):

    @defop(_name, "activation", 1, params=PARAMS[_name], backward=(BACKWARD[_name],))
    def _normalised(ts, p, _name=_name):
        (x,) = ts
        _float(x, _name)
        _axis(x, p, _name)
        return [x]


for _name in ("gelu", "silu"):

    @defop(_name, "activation", 1, params=PARAMS[_name], backward=(BACKWARD[_name],))
    def _pointwise(ts, p, _name=_name):
        (x,) = ts
        _float(x, _name)
        return [x]


for _name in GRAD_PARAMS:

    @defop(_name, "activation_grad", 2, params=GRAD_PARAMS[_name])
    def _grad(ts, p, _name=_name):
        v, dy = ts
        _float(v, _name)
        _require(dy == v, f"{_name}: cotangent {dy} differs from {v}")
        if "axis" in p:
            _axis(v, p, _name)
        return [v]
