"""The ``state="mlstate"`` codec on the host (numpy, written independently of the traced one
in mlstate.py: ``frexp``), for ``init`` / ``export_state`` / reading a device state back."""
from __future__ import annotations

from typing import Tuple

import numpy as np

BIAS = 192          # the exponent bias of the ``exp`` piece (mlstate.py's module doc)
I32_BASE = 2048     # the base of an int32 leaf's three digits


def encode_f32_np(x) -> Tuple[np.ndarray, ...]:
    x = np.asarray(x, np.float32)
    m, e = np.frexp(np.abs(x))                      # |x| = m * 2^e, m in [0.5, 1)
    with np.errstate(invalid="ignore"):
        f = (m.astype(np.float64) * 2 - 1) * 2.0 ** 23
        hi = np.floor(f / 4096)
        lo = f - hi * 4096
        hi, lo = np.where(lo >= 2048, hi + 1, hi), np.where(lo >= 2048, lo - 4096, lo)
    code = np.where(np.signbit(x), -(e - 1 + BIAS), e - 1 + BIAS).astype(np.float64)
    zero = x == 0
    pieces = (np.where(zero, x, code), np.where(zero, 0, hi), np.where(zero, 0, lo))
    return tuple(p.astype(np.float16) for p in pieces)


def decode_f32_np(code, hi, lo) -> np.ndarray:
    c = np.asarray(code, np.float64)
    m = 1 + (np.asarray(hi, np.float64) * 4096 + np.asarray(lo, np.float64)) * 2.0 ** -23
    with np.errstate(invalid="ignore"):
        y = np.ldexp(m, (np.abs(np.nan_to_num(c)) - BIAS).astype(np.int64))
    return np.where(c == 0, c, np.where(c < 0, -y, y)).astype(np.float32)


def encode_i32_np(n) -> Tuple[np.ndarray, ...]:
    n = np.asarray(n, np.int64)
    q = np.trunc(n / I32_BASE).astype(np.int64)
    r = n - q * I32_BASE
    q2 = np.trunc(q / I32_BASE).astype(np.int64)
    return tuple(p.astype(np.float16) for p in (q2, q - q2 * I32_BASE, r))


def decode_i32_np(hi, mid, lo) -> np.ndarray:
    h, m, l_ = (np.asarray(p).astype(np.int64) for p in (hi, mid, lo))
    return ((h * I32_BASE + m) * I32_BASE + l_).astype(np.int32)
