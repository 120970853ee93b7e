"""Random ops: MIL ``random_bernoulli``.

Core ML draws from its own generator, which is not documented; no interpreter can
reproduce its values. This one draws with numpy: ``np.random.default_rng(seed)`` when
``seed >= 0`` (the same values on every call, as a fixed seed promises) and fresh OS
entropy when ``seed == -1`` (MIL's default: a new stream per call). Only the distribution
is meant to match Core ML's, never the values: tests check statistics, not bits.
"""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import out


def _rng(seed) -> np.random.Generator:
    seed = int(np.asarray(seed))
    if seed < -1:
        raise ValueError(f"random op seed must be -1 or >= 0, got {seed}")
    return np.random.default_rng(None if seed == -1 else seed)


def _shape(shape) -> tuple:
    s = np.asarray(shape)
    if s.ndim != 1 or s.dtype.kind not in "iu" or (s <= 0).any():
        raise ValueError(f"random op shape must be a vector of positive ints, got {shape!r}")
    return tuple(int(d) for d in s)


@register("random_bernoulli")
def random_bernoulli(inputs):
    # coremltools' defaults: prob = 0.5 (fp32, which then sets the output dtype), seed = -1.
    prob = np.asarray(inputs.get("prob", np.float32(0.5)))
    if prob.dtype not in (np.float16, np.float32):
        raise TypeError(f"random_bernoulli prob must be fp16/fp32, got {prob.dtype}")
    draw = _rng(inputs.get("seed", -1)).random(_shape(inputs["shape"]))
    # uniform in [0, 1) below prob: P(1) = prob exactly (prob 0 -> all 0, prob 1 -> all 1).
    return (out(draw < float(prob), prob.dtype),)
