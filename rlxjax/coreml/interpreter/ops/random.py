"""Random ops: MIL ``random_bernoulli``, ``random_uniform``, ``random_normal``.

Core ML draws from its own generator, which is not documented; no interpreter can
reproduce its values. This one draws with numpy: ``np.random.default_rng(seed)`` when
``seed >= 0`` (the same values on every call, as a fixed seed promises) and fresh OS
entropy when ``seed == -1`` (MIL's default: a new stream per call), or the one
reproducible stream ``seed_fresh_draws(n)`` sets up for tests. Only the distribution
is meant to match Core ML's, never the values: tests check statistics, not bits.
"""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import out


#: the stream seed -1 draws from when tests asked for reproducibility (``seed_fresh_draws``)
_FRESH = [None]


def seed_fresh_draws(seed) -> None:
    """Make the ``seed = -1`` draws of every reference program reproducible: from now on
    they come from one ``np.random.default_rng(seed)`` stream that advances with each draw
    (so repeated calls still give fresh numbers, the same ones in every test run).
    ``None`` goes back to fresh OS entropy per draw (the default). Core ML's own generator
    is not affected (its seed -1 stream is its own)."""
    _FRESH[0] = None if seed is None else np.random.default_rng(int(seed))


def _rng(seed) -> np.random.Generator:
    seed = int(np.asarray(seed))
    if seed < -1:
        raise ValueError(f"random op seed must be -1 or >= 0, got {seed}")
    if seed == -1:
        return _FRESH[0] if _FRESH[0] is not None else np.random.default_rng()
    return np.random.default_rng(seed)


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


def _float_param(inputs, name, default):
    v = np.asarray(inputs.get(name, np.float32(default)))
    if v.dtype not in (np.float16, np.float32):
        raise TypeError(f"random op {name} must be fp16/fp32, got {v.dtype}")
    return v


@register("random_uniform")
def random_uniform(inputs):
    # coremltools' defaults: low = 0, high = 1 (fp32: the output dtype), seed = -1.
    low, high = _float_param(inputs, "low", 0.0), _float_param(inputs, "high", 1.0)
    if low.dtype != high.dtype:
        raise TypeError(f"random_uniform low {low.dtype} and high {high.dtype} differ")
    draw = _rng(inputs.get("seed", -1)).uniform(float(low), float(high),
                                                _shape(inputs["shape"]))
    # [low, high) in float64, then rounded to the output dtype: keep it below high.
    y = out(draw, low.dtype)
    return (np.where(y >= high, np.nextafter(high, low), y).astype(low.dtype),)


@register("random_normal")
def random_normal(inputs):
    # coremltools' defaults: mean = 0, stddev = 1 (fp32: the output dtype), seed = -1.
    mean, std = _float_param(inputs, "mean", 0.0), _float_param(inputs, "stddev", 1.0)
    if mean.dtype != std.dtype:
        raise TypeError(f"random_normal mean {mean.dtype} and stddev {std.dtype} differ")
    draw = _rng(inputs.get("seed", -1)).normal(float(mean), float(std),
                                               _shape(inputs["shape"]))
    return (out(draw, mean.dtype),)
