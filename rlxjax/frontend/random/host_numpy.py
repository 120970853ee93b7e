"""Stage 1 of the ``random="inputs"`` host part (host_compile.py) computed by numpy: no XLA
compile at all.

Stage 1 holds only integer, bool and key arithmetic - threefry's hash, key splits and
folds, the bit shifts that start turning bits into floats, counters - which numpy computes
with exactly the bits XLA does, whatever the order. This module evaluates those equations
when every one of them is in ``RULES`` (written after JAX's own definitions: threefry2x32
as jax/_src/random/threefry2x32.py computes it, with ``jax_threefry_partitionable``, the
default since JAX 0.5) and every key is a threefry key; anything else (an rbg key, a
``while`` in stage 1, a primitive not below, the old non-partitionable threefry) leaves
stage 1 to XLA (``supported`` is False). Keys are held as their uint32 data (shape + (2,)),
as ``jax.random.key_data`` gives them. tests/random/test_host_numpy.py checks every rule
against ``jax.jit`` over many keys, shapes and dtypes.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import jax
import numpy as np

from ... import _jax_compat as jc
from .liveness import is_key

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
U32 = np.uint32


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds, as JAX's ``threefry2x32`` primitive (broadcasting)."""
    k1, k2, x1, x2 = np.broadcast_arrays(*(np.asarray(a, U32) for a in (k1, k2, x1, x2)))
    ks = (k1, k2, k1 ^ k2 ^ U32(0x1BD11BDA))
    x0, x1 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = (x1 << U32(r)) | (x1 >> U32(32 - r))
            x1 = x0 ^ x1
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + U32(i + 1)
    return x0, x1


def _iota_2x32(shape):
    """(high, low) 32 bits of the row-major index over ``shape`` (prng.iota_2x32_shape)."""
    idx = np.arange(math.prod(shape), dtype=np.uint64).reshape(shape)
    return (idx >> np.uint64(32)).astype(U32), (idx & np.uint64(0xFFFFFFFF)).astype(U32)


def _per_key(keys, n):
    """The two words of each key, with ``n`` trailing axes to broadcast against."""
    k = keys.reshape(keys.shape[:-1] + (1,) * n + (2,))
    return k[..., 0], k[..., 1]


def _random_bits(keys, *, bit_width, shape):
    k1, k2 = _per_key(keys, len(shape))
    b1, b2 = threefry2x32(k1, k2, *_iota_2x32(shape))
    if bit_width == 64:
        return (b1.astype(np.uint64) << np.uint64(32)) | b2.astype(np.uint64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else bits.astype(f"uint{bit_width}")


def _random_split(keys, *, shape):
    k1, k2 = _per_key(keys, len(shape))
    return np.stack(threefry2x32(k1, k2, *_iota_2x32(shape)), axis=-1)


def _random_fold_in(keys, msgs):
    msgs = np.asarray(msgs, U32)
    return np.stack(threefry2x32(keys[..., 0], keys[..., 1], U32(0), msgs), axis=-1)


def _random_seed(seeds, **_):
    seeds = np.asarray(seeds)
    if seeds.dtype.itemsize == 8:
        hi = (seeds.view(np.uint64) >> np.uint64(32)).astype(U32)
    else:
        hi = np.zeros(seeds.shape, U32)
    return np.stack([hi, seeds.astype(U32)], axis=-1)


def _shift(kind):
    """lax's shifts: the amount read as unsigned; at or past the width, 0 (or the sign)."""
    def rule(x, s):
        bits = 8 * x.dtype.itemsize
        unsigned, signed = np.dtype(f"uint{bits}"), np.dtype(f"int{bits}")
        s = np.asarray(s).astype(unsigned)
        big = s >= bits
        safe = np.where(big, 0, s).astype(unsigned)
        if kind == "arithmetic":
            sx = x.astype(signed)
            out = np.where(big, np.where(sx < 0, -1, 0).astype(signed), sx >> safe.astype(signed))
        else:
            u = x.astype(unsigned)
            out = np.where(big, unsigned.type(0), (u << safe) if kind == "left" else (u >> safe))
        return np.asarray(out).astype(x.dtype)
    return rule


def _div(x, y):
    """XLA's integer division: truncated; x / 0 is -1 (all ones), INT_MIN / -1 INT_MIN."""
    zero = y == 0
    safe = np.where(zero, 1, y).astype(y.dtype)
    q = x // safe
    if np.issubdtype(x.dtype, np.signedinteger):
        q = q + ((x % safe != 0) & ((x < 0) != (safe < 0))).astype(x.dtype)
    return np.where(zero, np.array(-1).astype(x.dtype), q).astype(x.dtype)


def _rem(x, y):
    """XLA's integer remainder: the dividend's sign; x % 0 is x."""
    zero = y == 0
    return np.where(zero, x, np.fmod(x, np.where(zero, 1, y).astype(y.dtype))).astype(x.dtype)


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, key=False, **_):
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    if key:
        shape, dims = shape + (2,), dims + (len(shape),)
    full = [1] * len(shape)
    for d, n in zip(dims, x.shape):
        full[d] = n
    return np.broadcast_to(x.reshape(full), shape)


def _reshape(x, *, new_sizes, dimensions=None, key=False, **_):
    if dimensions is not None:
        raise NotImplementedError("reshape with dimensions")
    return x.reshape(tuple(new_sizes) + ((2,) if key else ()))


def _slice(x, *, start_indices, limit_indices, strides=None, key=False):
    strides = strides or (1,) * len(start_indices)
    return x[tuple(slice(a, b, c) for a, b, c in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(x, *starts, slice_sizes, key=False):
    idx = []
    for d, (s, n) in enumerate(zip(starts, slice_sizes)):
        s = int(np.clip(int(s), 0, x.shape[d] - n))
        idx.append(slice(s, s + n))
    return x[tuple(idx)]


def _select_n(pred, *cases, key=False):
    pred = np.asarray(pred)
    if key:
        pred = pred[..., None]
    if pred.dtype == np.bool_:
        return np.where(pred, cases[1], cases[0])
    return np.choose(pred.astype(np.int64), np.broadcast_arrays(*cases))


def _iota(*, dtype, shape, dimension, **_):
    n = shape[dimension]
    r = np.arange(n, dtype=dtype).reshape([n if i == dimension else 1
                                           for i in range(len(shape))])
    return np.broadcast_to(r, shape)


def _convert(x, *, new_dtype, **_):
    return np.asarray(x).astype(new_dtype)


_ELEMENTWISE: Dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "max": np.maximum, "min": np.minimum,
    "abs": np.abs, "div": _div, "rem": _rem,
}

#: primitive -> (rule(*operands, **params), whether it moves keys around as data)
RULES: Dict[str, tuple] = {
    "random_bits": (_random_bits, False), "random_split": (_random_split, False),
    "random_fold_in": (_random_fold_in, False), "random_seed": (_random_seed, False),
    "random_wrap": (lambda x, **_: x, False), "random_unwrap": (lambda x: x, False),
    "random_clone": (lambda x: x, False), "copy": (lambda x: x, True),
    "copy_p": (lambda x: x, True),
    "threefry2x32": (lambda *a: list(threefry2x32(*a)), False),
    "shift_left": (_shift("left"), False),
    "shift_right_logical": (_shift("logical"), False),
    "shift_right_arithmetic": (_shift("arithmetic"), False),
    "convert_element_type": (_convert, False),
    "broadcast_in_dim": (_broadcast_in_dim, True), "reshape": (_reshape, True),
    "squeeze": (lambda x, *, dimensions, key=False: np.squeeze(x, tuple(dimensions)), True),
    "slice": (_slice, True), "dynamic_slice": (_dynamic_slice, True),
    "concatenate": (lambda *xs, dimension, key=False: np.concatenate(xs, dimension), True),
    "transpose": (lambda x, *, permutation, key=False: np.transpose(
        x, tuple(permutation) + ((x.ndim - 1,) if key else ())), True),
    "rev": (lambda x, *, dimensions, key=False: np.flip(x, tuple(dimensions)), True),
    "select_n": (_select_n, True), "iota": (_iota, False),
    "clamp": (lambda lo, x, hi: np.clip(x, lo, hi), False),
}
def _elementwise(fn):
    def rule(*xs, **params):  # (jax >= 0.9: optional params such as out_dtype=None)
        if any(p is not None for p in params.values()):
            raise NotImplementedError(f"{fn.__name__} with {params}")
        return fn(*xs)
    return rule


for _name, _fn in _ELEMENTWISE.items():
    RULES[_name] = (_elementwise(_fn), False)


def supported(eqns) -> bool:
    """Whether numpy computes all of ``eqns`` (threefry keys only)."""
    if not jax.config.jax_threefry_partitionable:
        return False
    threefry = jax.eval_shape(lambda: jax.random.key(0, impl="threefry2x32")).dtype
    for eqn in eqns:
        if eqn.primitive.name not in RULES or eqn.effects:
            return False
        reads_keys = any(is_key(v.aval) for v in eqn.invars)
        if reads_keys and not (RULES[eqn.primitive.name][1] or
                               eqn.primitive.name.startswith("random_")):
            return False
        if any(True for v in eqn.params.values() if isinstance(v, (jc.Jaxpr, jc.ClosedJaxpr))):
            return False
        atoms = list(eqn.invars) + list(eqn.outvars)
        if any(is_key(v.aval) and v.aval.dtype != threefry for v in atoms):
            return False
    return True


def to_numpy(x) -> np.ndarray:
    """A stage-1 value as numpy holds it (a key as its uint32 data)."""
    if jax.dtypes.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def to_jax(v, x):
    """A numpy stage-1 value as stage 2 reads it (a key wrapped again)."""
    return jax.random.wrap_key_data(x, impl="threefry2x32") if is_key(v.aval) else x


def _check(v, x) -> np.ndarray:
    shape = tuple(v.aval.shape) + ((2,) if is_key(v.aval) else ())
    dtype = np.dtype(U32) if is_key(v.aval) else np.dtype(v.aval.dtype)
    x = np.asarray(x)
    if x.shape != shape or x.dtype != dtype:
        raise NotImplementedError(f"{v.aval}: numpy made {x.dtype}{list(x.shape)}")
    return x


def run(env: Dict[Any, np.ndarray], eqns) -> None:
    """Evaluate ``eqns`` into ``env`` (numpy values); raises NotImplementedError where a
    rule's result is not the equation's type (the caller then uses XLA)."""
    def read(v):
        if isinstance(v, jc.Literal):
            return np.asarray(v.val, dtype=v.aval.dtype)
        return env[v]

    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for eqn in eqns:
            rule, moves_keys = RULES[eqn.primitive.name]
            params = dict(eqn.params)
            params.pop("sharding", None)
            if moves_keys:
                params["key"] = any(is_key(v.aval) for v in eqn.outvars)
            outs = rule(*[read(v) for v in eqn.invars], **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            for v, o in zip(eqn.outvars, outs):
                env[v] = _check(v, o)
