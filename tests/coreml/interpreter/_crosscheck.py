"""Helpers for cross-checking reference ops against coremltools' own value_inference."""
from __future__ import annotations

import logging

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, types

from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

# value_inference stores float64 results into fp32 vars and says so on every call.
logging.getLogger("coremltools").setLevel(logging.ERROR)

IOS15, IOS16, IOS17 = ct.target.iOS15, ct.target.iOS16, ct.target.iOS17

#: every op name some cross-check test exercises (filled as the test module is imported)
CHECKED: set = set()


def checks(*names):
    """Record that the caller cross-checks ``names``; returns them for parametrize."""
    CHECKED.update(names)
    return list(names)


def coreml_eval(op, opset, kwargs):
    """Build ``op`` with const inputs in a Function of ``opset``: list of (val, shape, dtype)."""
    with np.errstate(all="ignore"), Function({}, opset_version=opset):
        res = getattr(mb, op)(**kwargs)
    outs = res if isinstance(res, (list, tuple)) else [res]
    result = []
    for v in outs:
        assert v.val is not None, f"coremltools computed no value for {op}"
        dtype = np.dtype(types.nptype_from_builtin(v.dtype))
        shape = tuple(int(d) for d in v.shape)
        # Type inference is the authority on shape; value_inference sometimes returns a numpy
        # scalar or an array of a different rank (e.g. squeeze to rank 0), same element count;
        # rank-0 values are not cast to the declared dtype by coremltools (its scalar types keep
        # whatever numpy produced, often float64): cast here, as serialisation would.
        val = np.asarray(v.val).astype(dtype)
        assert val.size == int(np.prod(shape)), (op, val.shape, shape)
        result.append((val.reshape(shape), shape, dtype))
    return result


def mine_inputs(kwargs):
    conv = {}
    for k, v in kwargs.items():
        if isinstance(v, str):
            conv[k] = v
        elif isinstance(v, (list, tuple)):
            conv[k] = [np.asarray(e) for e in v]
        else:
            conv[k] = np.asarray(v)
    return conv


def cross_check(op, kwargs, *, opset=IOS15, rtol=0.0, atol=0.0):
    """Registry op vs coremltools value_inference: same count, dtype, shape; values exact
    (NaN == NaN) unless a tolerance is given."""
    expected = coreml_eval(op, opset, kwargs)
    with np.errstate(all="ignore"):
        got = MIL_OP_IMPLS[op](mine_inputs(kwargs))
    assert len(got) == len(expected), (op, len(got), len(expected))
    for g, (val, shape, dtype) in zip(got, expected):
        assert isinstance(g, np.ndarray), (op, type(g))
        assert g.dtype == dtype, (op, g.dtype, dtype)
        assert g.shape == shape, (op, g.shape, shape)
        if rtol == 0 and atol == 0:
            np.testing.assert_array_equal(g, val, err_msg=op, strict=True)
        else:
            np.testing.assert_allclose(g.astype(np.float64), val.astype(np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True, err_msg=op)
    return got
