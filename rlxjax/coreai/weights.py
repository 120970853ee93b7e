"""Frozen weights (RLX ``weight``, ``trainable=`` / ``compress=``) in Core AI programs.

A weight with scheme ``"none"`` is a constant. A compressed one is its payload (made by the
same quantiser as for Core ML, rlxjax/compression/schemes.py, so both formats store the same
numbers) decompressed by one Core AI op, to exactly the fp32 ``value`` the RLX node carries
(the values the training step's maths and its JAX reference use):

* ``fp16``: an fp16 constant and a ``cast`` to fp32;
* ``int8`` / ``int4``: ``blockwise_shift_scale(data, scale, 0, 0)`` = ``scale * data``, one
  fp32 rounding as the quantiser's own dequantisation;
* ``palettize8`` / ``palettize4``: ``lut_to_dense(indices, lut)`` with one LUT for the tensor.

Large payloads (the weight store's, rlxjax/weightstore.py) become constants over their own
memory (``ca_private.buffer_constant``: no copy in the program; the pages are read from the
store's file when the asset is written). coreai-core 1.0.0b3's ``constant`` stores a 4-bit
array one value per byte while its runtime reads two per byte, so int4 data is packed here,
two values a byte (low nibble first, as the runtime reads it), into a ``si4`` constant over
the packed bytes: half the bytes of int8 plus the blockwise scales. palettize4 indices still
travel as uint8 into the 16-entry LUT padded to 256 entries (as large as palettize8).
"""
from __future__ import annotations

import numpy as np

from ..weightstore import is_mapped, release
from . import ca_private
from .ops_base import NP, carried, rule


@rule("weight")
def _weight(ctx, node, ins):
    p = node.params
    t = node.outputs[0].type
    scheme = p["scheme"]
    if scheme == "none":
        value = p["value"].astype(NP[t.dtype], copy=False)  # fp16: rounded, then carried
        value = value.astype(NP[carried(t.dtype)], copy=False)
        out = ca_private.buffer_constant(value, value.shape, "f32") \
            if is_mapped(value) and value.dtype == np.float32 else ctx.const(value)
    else:
        # an fp16 weight: the values rounded to fp16, carried as fp32 (ops_base.py rounds it)
        out = _decompress(ctx, p, scheme)
    for k in ("value", "data"):  # the program holds its copy now: drop the store's pages
        release(p.get(k))
    return out


def _decompress(ctx, p, scheme: str):
    ca, value = ctx.ca, p["value"]
    if scheme == "fp16":
        return ca.cast(ctx.const(p["data"].astype(np.float16)), ca.float32)
    if scheme == "int4":
        scale = np.asarray(p["scale"], np.float32)
        data = ca_private.buffer_constant(pack_int4(p["data"]), np.shape(p["data"]), "si4")
        return ca.blockwise_shift_scale(data, ctx.const(scale),
                                        ca_private.zeros_si4(scale.shape),
                                        ctx.const(np.zeros(scale.shape, np.float32)))
    if scheme == "int8":
        data, scale = np.asarray(p["data"], np.int8), np.asarray(p["scale"], np.float32)
        return ca.blockwise_shift_scale(
            ca_private.buffer_constant(data, data.shape, "si8") if is_mapped(data)
            else ctx.const(data), ctx.const(scale),
            ctx.const(np.zeros(scale.shape, np.int8)),
            ctx.const(np.zeros(scale.shape, np.float32)))
    indices = np.asarray(p["data"], np.uint8)
    lut = np.zeros(256, np.float32)
    lut[:p["lut"].size] = np.asarray(p["lut"], np.float32).reshape(-1)
    return ca.lut_to_dense(ctx.const(indices.reshape(value.shape)),
                           ctx.const(lut.reshape((1,) * value.ndim + (256, 1))),
                           ctx.const(np.int16(0)))


def pack_int4(data) -> np.ndarray:
    """int4 values (an int8 array, -8..7, C order) two a byte, the first in the low nibble
    (a last odd value with a zero nibble), read in pieces: never a whole int8 temporary."""
    flat = np.asarray(data, np.int8).reshape(-1)
    out = np.empty(-(-flat.size // 2), np.uint8)
    piece = 1 << 22  # even: pieces start on a byte
    for i in range(0, flat.size, piece):
        nib = flat[i:i + piece].view(np.uint8) & 0xF
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        out[i // 2:i // 2 + nib.size // 2] = nib[0::2] | (nib[1::2] << 4)
    return out
