"""Lowering: frozen weights (RLX ``weight``), plain or compressed with Core ML's constexpr ops.

A weight with scheme ``"none"`` is a constant. A compressed one is one ``constexpr_*`` op
on its payload (rlxjax/compression/schemes.py), decompressed by Core ML when the model loads:

* iOS16 / iOS17: ``constexpr_cast`` (fp16), ``constexpr_affine_dequantize`` (int8, per
  channel), ``constexpr_lut_to_dense`` (palettize: bit-packed uint8 indices, one LUT);
* iOS18 and newer: ``constexpr_cast``, ``constexpr_blockwise_shift_scale`` (int8, int4),
  ``constexpr_lut_to_dense`` in its iOS18 form (uint4 / uint8 indices of the weight's
  shape, a LUT of rank + 2).

The op's parameters are serialised as coremltools does: attributes before iOS18, value-bound
inputs from iOS18. The result is fp32 (the payload decompresses to exactly the ``value`` the
RLX node carries); an fp16 program casts it.
"""
from __future__ import annotations

import numpy as np

from ...errors import TargetError
from ...ir import DType, TensorType
from ..compress import SCHEMES
from ..ct_private import pack_bits
from ..registry import lowering


@lowering("weight")
def _weight(ctx, node):
    p = node.params
    t = ctx.out_type(node)
    scheme = p["scheme"]
    if scheme == "none":  # not foldable: a transposed use must not store a second copy
        return ctx.b.const(p["value"].astype(t.dtype.np, copy=False), foldable=False)
    need = SCHEMES[scheme]
    if not ctx.target.at_least(need):
        raise TargetError(f"weight '{p['name']}' is stored with compress={scheme!r}, which "
                          f"needs target {need} or newer (the program targets "
                          f"{ctx.target.name}): pass target='{need}'")
    var = _decompress(ctx.b, p, scheme, ctx.target.at_least("iOS18"))
    if t.dtype != DType.f32:  # an fp16 program computes with the values rounded to fp16
        var = ctx.b.op("cast", t, x=var, dtype="fp16")
    return var


def _decompress(b, p, scheme, ios18):
    value = p["value"]
    f32 = TensorType(value.shape, DType.f32)
    legacy = not ios18
    if scheme == "fp16":
        return b.constexpr("constexpr_cast", f32, {"source_val": p["data"],
                                                   "output_dtype": "fp32"}, legacy)
    if scheme in ("int8", "int4"):
        data, scale = p["data"], p["scale"]
        if ios18:
            payload = data if scheme == "int8" else (data, "int4")
            return b.constexpr("constexpr_blockwise_shift_scale", f32,
                               {"data": payload, "scale": scale}, False)
        axis = value.ndim - 1  # per channel on the last axis (compression/schemes.py)
        return b.constexpr("constexpr_affine_dequantize", f32, {
            "quantized_data": data,
            "zero_point": np.int8(0),
            "scale": scale.reshape(-1),
            "axis": np.int32(axis)}, True)
    nbits = 4 if scheme == "palettize4" else 8
    indices, lut = p["data"], p["lut"]
    if ios18:
        payload = indices if nbits == 8 else (indices, "uint4")
        return b.constexpr("constexpr_lut_to_dense", f32, {
            "indices": payload,
            "lut": lut.reshape((1,) * value.ndim + (lut.size, 1))}, False)
    return b.constexpr("constexpr_lut_to_dense", f32, {
        "indices": pack_bits(indices, nbits), "lut": lut,
        "shape": np.asarray(value.shape, np.uint32)}, True)
