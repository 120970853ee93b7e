"""The pool family of RLX ops: windowed reductions and their selection-based backward.

Every op here works on an already padded (and base-dilated) operand: the frontend puts
padding in front of them as an explicit ``pad`` with the reduction's identity
(-inf / +inf / 0), which is exact and gives the padding its own gradient rule. A window
has, per dimension, a size ``k``, a stride ``s`` and a dilation ``d`` (taps at
``i*s + j*d``, ``j < k``); dims that are not pooled have ``k = s = d = 1``.

- ``reduce_window_max|min|sum`` [x]: lax.reduce_window_* without padding.
- ``select_and_scatter_add`` [source, operand]: in each window of ``operand`` select one
  position with ``select`` ("ge": the first maximum, "le": the first minimum, in row-major
  window order, as XLA's select_and_scatter does) and add that window's ``source`` value
  there. The VJP of max/min pooling.
- ``select_and_gather_add`` [tangents, operand]: per window, the ``tangents`` value at the
  position ``select`` picks. The JVP of max/min pooling, and the transpose of the scatter.
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import INTS, Param, one_of
from .types import Dyn, DType, TensorType

WINDOW_REDUCTIONS = ("reduce_window_max", "reduce_window_min", "reduce_window_sum")
SELECTS = ("ge", "le")
WINDOW_PARAMS = {"window": Param(INTS), "strides": Param(INTS), "dilation": Param(INTS)}
SELECT_PARAMS = {**WINDOW_PARAMS, "select": Param(one_of(*SELECTS))}


def window_out_shape(shape, window, strides, dilation):
    """Output shape of an unpadded window reduction; raises IRTypeError when a window does
    not fit or the parameters are malformed."""
    _require(len(window) == len(strides) == len(dilation) == len(shape),
             f"window {window} / strides {strides} / dilation {dilation} for shape {shape}")
    out = []
    for n, k, s, d in zip(shape, window, strides, dilation):
        _require(k >= 1 and s >= 1 and d >= 1, f"bad window ({k}, stride {s}, dilation {d})")
        span = (k - 1) * d + 1
        if isinstance(n, Dyn):  # a flexible axis (docs/flexible.md): windows of one only
            _require(k == s == 1, f"window {k} / stride {s} over the flexible dim {n}")
            out.append(n)
            continue
        _require(n >= span, f"window of span {span} does not fit a dim of size {n}")
        out.append((n - span) // s + 1)
    return tuple(out)


def _window_params(p):
    return p["window"], p["strides"], p["dilation"]


for _n in WINDOW_REDUCTIONS:

    @defop(_n, "pool", 1, params=WINDOW_PARAMS)
    def _reduce_window(ts, p, _n=_n):
        (x,) = ts
        _require(x.dtype in (DType.f32, DType.f16, DType.i32), f"{_n} of {x}")
        return [x.with_shape(window_out_shape(x.shape, *_window_params(p)))]


def _check_select(ts, p, op):
    a, operand = ts
    _require(p["select"] in SELECTS, f"{op}: select must be one of {SELECTS}")
    _require(operand.dtype != DType.bool and a.dtype == operand.dtype,
             f"{op}: needs numeric inputs of one dtype, got {a} and {operand}")
    return a, operand, window_out_shape(operand.shape, *_window_params(p))


@defop("select_and_scatter_add", "pool", 2, params=SELECT_PARAMS)
def _select_and_scatter_add(ts, p):
    source, operand, out = _check_select(ts, p, "select_and_scatter_add")
    _require(tuple(source.shape) == out,
             f"select_and_scatter_add: source {source} vs windows of {operand} ({out})")
    return [operand]


@defop("select_and_gather_add", "pool", 2, params=SELECT_PARAMS)
def _select_and_gather_add(ts, p):
    tangents, operand, out = _check_select(ts, p, "select_and_gather_add")
    _require(tuple(tangents.shape) == tuple(operand.shape),
             f"select_and_gather_add: tangents {tangents} vs operand {operand}")
    return [TensorType(out, operand.dtype)]
