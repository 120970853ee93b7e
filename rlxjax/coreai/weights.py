"""Frozen weights (RLX ``weight``, ``trainable=`` / ``compress=``) in Core AI programs.

A weight with scheme ``"none"`` is a constant. A compressed one is its payload (made by the
same quantiser as for Core ML, rlxjax/coreml/compress.py, so both formats store the same
numbers) decompressed by one Core AI op, to exactly the fp32 ``value`` the RLX node carries
(the values the training step's maths and its JAX reference use):

* ``fp16``: an fp16 constant and a ``cast`` to fp32;
* ``int8`` / ``int4``: ``blockwise_shift_scale(data, scale, 0, 0)`` = ``scale * data``, one
  fp32 rounding as the quantiser's own dequantisation;
* ``palettize8`` / ``palettize4``: ``lut_to_dense(indices, lut)`` with one LUT for the tensor.

coreai-core 1.0.0b3 stores a 4-bit constant one value per byte while its runtime reads two
per byte (measured: every other value comes back 0 or wrong), so the 4-bit schemes travel
in 8-bit containers: int4 data as int8 (values -8..7), palettize4 indices as uint8 into the
16-entry LUT padded to 256 entries. Exact, but an int4 / palettize4 ``.aimodel`` is as large
as an int8 / palettize8 one (docs/coreai.md).
"""
from __future__ import annotations

import numpy as np

from ..weightstore import release
from .ops_base import NP, carried, rule


@rule("weight")
def _weight(ctx, node, ins):
    p = node.params
    t = node.outputs[0].type
    scheme = p["scheme"]
    if scheme == "none":
        value = p["value"].astype(NP[t.dtype], copy=False)  # fp16: rounded, then carried
        out = ctx.const(value.astype(NP[carried(t.dtype)], copy=False))
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
    if scheme in ("int8", "int4"):
        data, scale = np.asarray(p["data"], np.int8), np.asarray(p["scale"], np.float32)
        return ca.blockwise_shift_scale(ctx.const(data), ctx.const(scale),
                                        ctx.const(np.zeros(scale.shape, np.int8)),
                                        ctx.const(np.zeros(scale.shape, np.float32)))
    indices = np.asarray(p["data"], np.uint8)
    lut = np.zeros(256, np.float32)
    lut[:p["lut"].size] = np.asarray(p["lut"], np.float32).reshape(-1)
    return ca.lut_to_dense(ctx.const(indices.reshape(value.shape)),
                           ctx.const(lut.reshape((1,) * value.ndim + (256, 1))),
                           ctx.const(np.int16(0)))
