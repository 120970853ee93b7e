"""Fold: reductions, accumulated in the operand's dtype (numpy's pairwise summation)."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl

_REDUCE = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
           "reduce_prod": np.prod}


for _name, _fn in _REDUCE.items():

    @register_impl("fold", _name)
    def _reduce(p, x, _fn=_fn):
        axes = tuple(p["axes"])
        if not axes:
            return x  # (keep_dims changes nothing either)
        if _fn in (np.max, np.min) and any(x.shape[a] == 0 for a in axes):
            return None  # the identity of max/min over nothing is JAX's -inf/+inf
        kw = {"dtype": x.dtype} if _fn in (np.sum, np.prod) else {}
        return np.asarray(_fn(x, axis=axes, keepdims=p.get("keep_dims", False), **kw))


def _arg_fold(fn):
    def impl(p, x):
        if x.shape[p["axis"]] == 0:
            return None
        # numpy and JAX both return the first index among equal extrema, NaN counting as
        # the extremum in both
        return np.asarray(fn(x, axis=p["axis"], keepdims=p.get("keep_dims", False)),
                          dtype=np.int32)

    return impl


register_impl("fold", "argmax")(_arg_fold(np.argmax))
register_impl("fold", "argmin")(_arg_fold(np.argmin))
