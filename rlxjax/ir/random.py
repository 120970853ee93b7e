"""The random family of RLX ops: values drawn on the device.

``bernoulli(shape, dtype, prob, seed)``, ``random_uniform(shape, dtype, low, high, seed)``
and ``random_normal(shape, dtype, mean, std, seed)`` have no inputs and yield a float tensor:
bernoulli 0/1 (1 with probability ``prob``), random_uniform values in ``[low, high)``,
random_normal values from ``N(mean, std**2)``. ``seed >= 0`` asks the backend for a reproducible
stream, ``seed = -1`` for fresh randomness on each call. The values are the backend's own
(Core ML's generator on the device, numpy's in the reference interpreter), never JAX's.
A random op is not a function of its parameters: transforms must neither fold nor merge it.
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import DTYPE, FLOAT, INT, INTS, Param
from .types import TensorType


@defop("bernoulli", "random", 0, effect="random", params={
    "shape": Param(INTS), "dtype": Param(DTYPE), "prob": Param(FLOAT), "seed": Param(INT)})
def _bernoulli(ts, p):
    shape, dtype, prob, seed = p["shape"], p["dtype"], p["prob"], p["seed"]
    _require(dtype.is_float, f"bernoulli yields a float mask, got dtype {dtype}")
    _require(len(shape) >= 1 and all(isinstance(d, int) and d > 0 for d in shape),
             f"bernoulli needs a static shape of rank >= 1 with positive dims, got {shape}")
    _require(isinstance(prob, float) and 0.0 <= prob <= 1.0, f"bernoulli prob {prob!r}")
    _require(isinstance(seed, int) and seed >= -1, f"bernoulli seed {seed!r} (want -1 or >= 0)")
    return [TensorType(tuple(shape), dtype)]


def _check_draw(name, shape, dtype, seed):
    _require(dtype.is_float, f"{name} yields floats, got dtype {dtype}")
    _require(len(shape) >= 1 and all(isinstance(d, int) and d > 0 for d in shape),
             f"{name} needs a static shape of rank >= 1 with positive dims, got {shape}")
    _require(isinstance(seed, int) and seed >= -1, f"{name} seed {seed!r} (want -1 or >= 0)")
    return [TensorType(tuple(shape), dtype)]


@defop("random_uniform", "random", 0, effect="random", params={
    "shape": Param(INTS), "dtype": Param(DTYPE), "low": Param(FLOAT), "high": Param(FLOAT),
    "seed": Param(INT)})
def _random_uniform(ts, p):
    """Uniform on ``[low, high)`` (``random="device"``: jax.random.uniform's draw)."""
    _require(p["low"] <= p["high"], f"random_uniform low {p['low']} > high {p['high']}")
    return _check_draw("random_uniform", p["shape"], p["dtype"], p["seed"])


@defop("random_normal", "random", 0, effect="random", params={
    "shape": Param(INTS), "dtype": Param(DTYPE), "mean": Param(FLOAT), "std": Param(FLOAT),
    "seed": Param(INT)})
def _random_normal(ts, p):
    """Normal ``N(mean, std**2)`` (``random="device"``: jax.random.normal's draw)."""
    _require(p["std"] >= 0.0, f"random_normal std {p['std']} < 0")
    return _check_draw("random_normal", p["shape"], p["dtype"], p["seed"])
