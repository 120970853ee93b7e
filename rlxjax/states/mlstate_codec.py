"""The codecs of ``state="mlstate"`` (states/mlstate.py's module doc): how a format's
states hold the fp32 / int32 leaves - Core ML's exact three fp16 pieces (``F16x3``), Core
AI's values as they are (``Plain``), the rounded fp16 opt-in of inference caches (``F16``) -
and the fp16 codec traced into the program."""
from __future__ import annotations

from typing import Dict, Tuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from .mlstate_np import (BIAS, I32_BASE, decode_f32_np, decode_i32_np,
                         encode_f32_np, encode_i32_np)

F32_PIECES = ("exp", "hi", "lo")
I32_PIECES = ("hi", "mid", "lo")


#: 2^e for every exponent a nonzero fp32 value has as m * 2^e, m in [1, 2) (subnormals'
#: down to -149; an infinity's is 127 in ``encode_f32``): ``decode_f32`` reads its power of
#: two from this table, each entry an fp32 value exactly
_E_MIN, _E_MAX = -149, 127
_POW2 = np.ldexp(np.float32(1), np.arange(_E_MIN, _E_MAX + 1)).astype(np.float32)

#: 2^-e as two factors, each an fp32 value (2^149 is not): |x| * first * second scales by
#: 2^-e exactly (powers of two, the intermediate m * 2^(e - e // 2) a normal number)
_E = np.arange(_E_MIN, _E_MAX + 1)
_INV_FIRST = np.ldexp(np.float32(1), -(_E // 2)).astype(np.float32)
_INV_SECOND = np.ldexp(np.float32(1), -(_E - _E // 2)).astype(np.float32)
_DIMS = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                   start_index_map=(0,))


def _lookup(table, k):
    """``table[k]`` elementwise (a gather: data movement, no arithmetic)."""
    return lax.gather(jnp.asarray(table), k[..., None], _DIMS, (1,),
                      mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


# -- the codec inside the program (traced like any JAX code) ------------------------------
def encode_f32(x):
    """fp32 vector -> three fp16 vectors (see module doc). e is first estimated as
    floor(log2 |x|), then settled by exact comparisons: |x| is scaled by 2^-e with two
    multiplications by powers of two (table lookups), and m = |x| * 2^-e is brought into
    [1, 2) by one halving or doubling (each exact). The pieces are exact whenever the
    runtime's log is within 1 of log2 |x| (an error of a factor of 2 in |x|)."""
    a = jnp.abs(x)
    e = jnp.clip(jnp.floor(jnp.log2(a)), _E_MIN, _E_MAX)   # |x| = 0: -inf, clipped
    k = (e - _E_MIN).astype(jnp.int32)
    y = a * _lookup(_INV_FIRST, k) * _lookup(_INV_SECOND, k)   # m in [0.5, 4)
    c = y >= 2.0
    y, e = jnp.where(c, y * 0.5, y), jnp.where(c, jnp.minimum(e + 1.0, _E_MAX), e)  # inf
    c = y < 1.0
    y, e = jnp.where(c, y * 2.0, y), jnp.where(c, e - 1.0, e)
    f = (y - 1.0) * 2.0 ** 23               # the fraction bits as an integer < 2^23
    hi = jnp.floor(f * 2.0 ** -12)
    lo = f - hi * 4096.0
    wrap = lo >= 2048.0
    hi, lo = jnp.where(wrap, hi + 1.0, hi), jnp.where(wrap, lo - 4096.0, lo)
    code = jnp.where(x < 0, -(e + BIAS), e + BIAS)
    zero = a == 0
    pieces = (jnp.where(zero, x, code), jnp.where(zero, 0.0, hi), jnp.where(zero, 0.0, lo))
    return tuple(p.astype(jnp.float16) for p in pieces)


def decode_f32(code, hi, lo):
    """Inverse of ``encode_f32``: m from the fraction digits, 2^e looked up in ``_POW2``
    (a gather: data movement, no arithmetic) and one multiplication, exact because m * 2^e
    is the fp32 value that was encoded (a NaN is carried by ``hi``). Every code the codec
    makes indexes the table (the gather clamps any other, as XLA's does)."""
    c, h, l_ = (p.astype(jnp.float32) for p in (code, hi, lo))
    y = 1.0 + (h * 4096.0 + l_) * 2.0 ** -23
    k = (jnp.abs(c) - (BIAS + _E_MIN)).astype(jnp.int32)
    y = y * _lookup(_POW2, k)
    return jnp.where(c == 0, c, jnp.where(c < 0, -y, y))


def encode_i32(n):
    b = jnp.full_like(n, I32_BASE)
    q = lax.div(n, b)
    return tuple(p.astype(jnp.float16) for p in (lax.div(q, b), lax.rem(q, b), lax.rem(n, b)))


def decode_i32(hi, mid, lo):
    h, m, l_ = (p.astype(jnp.int32) for p in (hi, mid, lo))
    return (h * I32_BASE + m) * I32_BASE + l_


# -- codecs: how a format's states hold the fp32 / int32 leaves ---------------------------
class Codec:
    """How the leaves of one dtype ('float32' / 'int32') are stored in a format's states:
    as the pieces ``pieces(dtype)``, each a vector of ``piece_dtype(dtype)``."""

    name = ""
    #: whether reading the leaves computes (a decode), so that a training step reads its
    #: states again where a later phase needs them rather than keeping the decoded leaves
    #: live (mlstate_graph.py ``rewrite_to_states``); the format's lowering then takes
    #: re-reads (rlxjax/program.py ``REREAD``)
    read_again = False

    def pieces(self, dtype: str) -> Tuple[str, ...]:
        raise NotImplementedError

    def piece_dtype(self, dtype: str) -> str:
        raise NotImplementedError

    def encode(self, dtype: str, flat):          # traced: vector -> pieces
        raise NotImplementedError

    def decode(self, dtype: str, *pieces):       # traced: pieces -> vector
        raise NotImplementedError

    def host_encode(self, dtype: str, flat) -> Tuple[np.ndarray, ...]:
        raise NotImplementedError

    def host_decode(self, dtype: str, *pieces) -> np.ndarray:
        raise NotImplementedError

    def metadata(self) -> Dict[str, object]:
        return {"encoding": self.name}


class F16x3(Codec):
    """Core ML: fp16 states, each fp32 / int32 value exact in three pieces (module doc)."""

    name = "rlxjax-f32x3-v1"
    read_again = True

    def pieces(self, dtype):
        return F32_PIECES if dtype == "float32" else I32_PIECES

    def piece_dtype(self, dtype):
        return "float16"

    def encode(self, dtype, flat):
        return list((encode_f32 if dtype == "float32" else encode_i32)(flat))

    def decode(self, dtype, *pieces):
        return (decode_f32 if dtype == "float32" else decode_i32)(*pieces)

    def host_encode(self, dtype, flat):
        return (encode_f32_np if dtype == "float32" else encode_i32_np)(flat)

    def host_decode(self, dtype, *pieces):
        return (decode_f32_np if dtype == "float32" else decode_i32_np)(*pieces)

    def metadata(self):
        return {"encoding": self.name, "exp_bias": BIAS, "i32_base": I32_BASE}


class Plain(Codec):
    """Core AI: fp32 and int32 states hold the values as they are (no codec)."""

    name = "plain"

    def pieces(self, dtype):
        return ("value",)

    def piece_dtype(self, dtype):
        return dtype

    def encode(self, dtype, flat):
        return [flat]

    def decode(self, dtype, value):
        return value

    def host_encode(self, dtype, flat):
        return (np.asarray(flat, dtype),)

    def host_decode(self, dtype, value):
        return np.asarray(value, dtype)


class F16(F16x3):
    """An explicit opt-in for inference caches (rlxjax/stateful.py, ``state_precision=
    "fp16"``) on fp16 states: each fp32 value rounded to one fp16 piece; int32 leaves exact
    as in ``F16x3``."""

    name = "fp16"

    def pieces(self, dtype):
        return ("f16",) if dtype == "float32" else I32_PIECES

    def encode(self, dtype, flat):
        return [flat.astype(jnp.float16)] if dtype == "float32" else super().encode(dtype, flat)

    def decode(self, dtype, *pieces):
        return pieces[0].astype(jnp.float32) if dtype == "float32" else \
            super().decode(dtype, *pieces)

    def host_encode(self, dtype, flat):
        return (np.asarray(flat, np.float32).astype(np.float16),) if dtype == "float32" \
            else super().host_encode(dtype, flat)

    def host_decode(self, dtype, *pieces):
        return np.asarray(pieces[0], np.float16).astype(np.float32) if dtype == "float32" \
            else super().host_decode(dtype, *pieces)

    def metadata(self):
        return {"encoding": self.name, "i32_base": I32_BASE}


#: by the name a format's registry entry gives (rlxjax/formats/__init__.py ``state_codec``;
#: "f16": the rounded opt-in of rlxjax/stateful.py)
CODECS: Dict[str, Codec] = {"f16x3": F16x3(), "plain": Plain(), "f16": F16()}
