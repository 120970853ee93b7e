"""lax.reduce_precision: bit-exact against XLA.

Three implementations are compared: JAX (XLA's integer algorithm on the bit pattern), the
constant folder's numpy port of that algorithm (transforms/fold/bitwise.py), and the Core
ML lowering, which has no bit cast and rounds with Veltkamp's splitting in fp32
(coreml/rules/bitwise.py). The lowering's formula is checked bit for bit on every float16
value and on every float32 value of the binades where rounding, overflow and the flush of
the reduced format's subnormals happen (``-m slow``: all 2**23 mantissas of each), and the
compiled program on hypothesis-drawn values and the special ones.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

import rlxjax
from rlxjax.transforms.fold.bitwise import reduce_precision as fold_reduce_precision

F32, F16 = np.float32, np.float16
#: (exponent_bits, mantissa_bits): fp16, bf16, fp16-range/bf16-precision, tiny formats
FORMATS = [(5, 10), (8, 7), (5, 7), (2, 1), (4, 3), (8, 22), (3, 23), (6, 1)]
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.5, 2.5, -2.5,
                    65504, 65519.99, 65520, 1e5, 2 ** -14, 2 ** -14 - 2 ** -25, 6e-8, 1e-42,
                    -1e-42, 3.4e38, -3.4e38, 1.17549435e-38, 2 ** 100, 2 ** 127 * 1.99], F32)


def _bits_equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    u = np.uint32 if want.dtype == F32 else np.uint16
    np.testing.assert_array_equal(got[~nan].view(u), want[~nan].view(u))


def _veltkamp_program(x, e, m):
    """The lowering's arithmetic, run by the reference interpreter on ``x``."""
    fn = lambda x: lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)  # noqa: E731
    return rlxjax.coreml_jit(fn, backend="reference")(x)


@pytest.mark.parametrize("e, m", FORMATS)
def test_every_float16_value(e, m):
    x = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(F16)
    want = fold_reduce_precision(x, e, m)
    if (e, m) in FORMATS[:3]:
        _bits_equal(want, jax.jit(lambda x: lax.reduce_precision(x, e, m))(x))
    _bits_equal(_veltkamp_program(x, e, m), want)


def _binades(exponents):
    mant = np.arange(0, 1 << 23, 1009, dtype=np.uint32)  # every 1009th (all: -m slow)
    ex = np.asarray(exponents, np.uint32)[:, None]
    pos = ((ex << 23) | mant[None, :]).reshape(-1)
    return np.concatenate([pos, pos | np.uint32(1 << 31)]).view(F32)


#: biased exponents where something happens: subnormals, the flush and overflow bounds of
#: 5- and 2-bit exponents, 1.0, the top binades (rounding up to inf)
EDGE_EXPONENTS = [0, 1, 2, 112, 113, 126, 127, 128, 142, 143, 200, 253, 254, 255]


@pytest.mark.parametrize("e, m", [(5, 10), (8, 7), (2, 1)])
def test_float32_binades(e, m):
    x = _binades(EDGE_EXPONENTS)
    want = fold_reduce_precision(x, e, m)
    _bits_equal(want, jax.jit(lambda x: lax.reduce_precision(x, e, m))(x))
    _bits_equal(_veltkamp_program(x, e, m), want)


@pytest.mark.slow
@pytest.mark.parametrize("e, m", [(5, 10), (8, 7), (5, 7), (2, 1), (8, 22), (4, 12)])
def test_float32_binades_every_mantissa(e, m):
    from rlxjax.coreml.rules import bitwise  # noqa: F401  (the formula under test)

    mant = np.arange(1 << 23, dtype=np.uint32)
    for ex in EDGE_EXPONENTS:
        for sign in (0, 1 << 31):
            x = (np.uint32(sign) | np.uint32(ex << 23) | mant).view(F32)
            _bits_equal(_veltkamp_program(x, e, m), fold_reduce_precision(x, e, m))


@settings(max_examples=5, deadline=None)
@given(hnp.arrays(F32, (40,), elements=st.floats(width=32, allow_nan=True)),
       st.sampled_from(FORMATS))
def test_compiled_program_matches_jax(x, fmt):
    e, m = fmt
    x = np.concatenate([x, SPECIAL])
    fn = lambda x: lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)  # noqa: E731
    _bits_equal(rlxjax.coreml_jit(fn, backend="reference")(x), jax.jit(fn)(x))
    _bits_equal(rlxjax.coreml_jit(lambda: fn(x), backend="reference")(), jax.jit(fn)(x))


def test_gradient_rounds_the_cotangent_too():
    x = np.linspace(-3, 3, 7, dtype=F32)
    loss = lambda x: jnp.sum(lax.reduce_precision(x * 1.1, 5, 3) * x)  # noqa: E731
    np.testing.assert_array_equal(rlxjax.coreml_grad(loss, backend="reference")(x),
                                  jax.grad(loss)(x))


def test_identity_formats_and_mantissa_zero():
    x = np.array([1.0, 3.0, np.nan], F32)
    c = rlxjax.coreml_jit(lambda x: lax.reduce_precision(x, 11, 52),
                          backend="reference").lower(x).compile()
    assert "reduce_precision" not in [n.op for n in c.graph.nodes]
    with pytest.raises(rlxjax.errors.UnsupportedPrimitiveError, match="mantissa_bits=0"):
        rlxjax.coreml_jit(lambda x: lax.reduce_precision(x, 8, 0), backend="reference")(x)
