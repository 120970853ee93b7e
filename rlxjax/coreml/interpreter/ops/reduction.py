"""Reductions (coremltools iOS15 reduction.py, iOS17 reduce_arg output_dtype).

``reduce_*`` over ``axes`` (default: all) with ``keep_dims`` (default False); the result is
stored in x's dtype (so int32 reduce_mean truncates toward zero, like coremltools).
fp16 inputs of accumulating reductions are reduced in fp32 and rounded to fp16 once.
"""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import STR_TO_DTYPE, acc_dtype, get, out, to_bool, to_int


def _sum_square(x, axis=None, keepdims=False):
    return np.sum(np.square(x), axis=axis, keepdims=keepdims)


def _l2_norm(x, axis=None, keepdims=False):
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


def _log_sum_exp(a, axis=None, keepdims=False):
    # coremltools' formula: subtract the max for stability, add it back after the log.
    max_values = np.amax(a, axis=axis, keepdims=True)
    temp = np.exp(a - max_values)
    if not keepdims:
        max_values = np.squeeze(max_values, axis=axis)
    return np.log(np.sum(temp, axis=axis, keepdims=keepdims)) + max_values


# name -> (operator, accumulates): non-accumulating ones are exact in any dtype. Public: the
# accelerated path (../accelerated/prepared.py) makes the same calls.
REDUCE = {
    "reduce_sum": (np.sum, True),
    "reduce_mean": (np.mean, True),
    "reduce_prod": (np.prod, True),
    "reduce_max": (np.max, False),
    "reduce_min": (np.min, False),
    "reduce_sum_square": (_sum_square, True),
    "reduce_l2_norm": (_l2_norm, True),
    "reduce_log_sum_exp": (_log_sum_exp, True),
    "reduce_l1_norm": (lambda x, axis=None, keepdims=False:
                       np.sum(np.abs(x), axis=axis, keepdims=keepdims), True),
    "reduce_log_sum": (lambda x, axis=None, keepdims=False:
                       np.log(np.sum(x, axis=axis, keepdims=keepdims)), True),
}


def _reduce(name, fn, accumulates):
    def impl(inputs):
        x = np.asarray(inputs["x"])
        if x.dtype not in (np.float16, np.float32, np.int32):
            raise TypeError(f"{name} does not accept dtype {x.dtype}")
        axes = inputs.get("axes")
        axes = None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
        keep = to_bool(get(inputs, "keep_dims", False))
        xin = x.astype(acc_dtype(x.dtype), copy=False) if accumulates else x
        return (out(fn(xin, axis=axes, keepdims=keep), x.dtype),)

    impl.__name__ = name
    register(name)(impl)


for _n, (_f, _acc) in REDUCE.items():
    _reduce(_n, _f, _acc)


def _reduce_arg(name, fn):
    def impl(inputs):
        x = np.asarray(inputs["x"])
        axis = to_int(get(inputs, "axis", -1))
        keep = to_bool(get(inputs, "keep_dims", False))
        # iOS17 added output_dtype ("int32" | "uint16"); iOS15 always int32.
        out_dtype = str(get(inputs, "output_dtype", "int32")).lower()
        if out_dtype not in ("int32", "uint16"):
            raise ValueError(f"invalid output_dtype {out_dtype!r}")
        # np.argmax / np.argmin return the FIRST index among ties.
        res = fn(x, axis=axis, keepdims=keep)
        return (out(res, STR_TO_DTYPE[out_dtype]),)

    impl.__name__ = name
    register(name)(impl)


_reduce_arg("reduce_argmax", np.argmax)
_reduce_arg("reduce_argmin", np.argmin)
