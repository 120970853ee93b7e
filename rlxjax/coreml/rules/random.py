"""Lowering: the random family, drawn by Core ML on the device.

``bernoulli`` -> MIL ``random_bernoulli`` (iOS15+): ``shape`` (i32 vector), ``prob`` (const,
its dtype fp16/fp32 is the output's) and ``seed`` (const i32; -1 = Core ML picks a fresh
seed). All its inputs are constants, but its value is not a function of them: the RLX op
is random and has no fold implementation, so constant folding (transforms/fold)
never touches it.
"""
from __future__ import annotations

import numpy as np

from ..registry import lowering


@lowering("bernoulli")
def _bernoulli(ctx, node):
    t = ctx.out_type(node)
    p = node.params
    return ctx.b.op("random_bernoulli", t,
                    shape=np.asarray(p["shape"], dtype=np.int32),
                    prob=np.asarray(p["prob"], dtype=t.dtype.np),
                    seed=np.int32(p["seed"]))


@lowering("random_uniform", since="iOS15")
def _random_uniform(ctx, node):
    t = ctx.out_type(node)
    p = node.params
    return ctx.b.op("random_uniform", t, shape=np.asarray(p["shape"], dtype=np.int32),
                    low=np.asarray(p["low"], dtype=t.dtype.np),
                    high=np.asarray(p["high"], dtype=t.dtype.np), seed=np.int32(p["seed"]))


@lowering("random_normal", since="iOS15")
def _random_normal(ctx, node):
    t = ctx.out_type(node)
    p = node.params
    return ctx.b.op("random_normal", t, shape=np.asarray(p["shape"], dtype=np.int32),
                    mean=np.asarray(p["mean"], dtype=t.dtype.np),
                    stddev=np.asarray(p["std"], dtype=t.dtype.np), seed=np.int32(p["seed"]))
