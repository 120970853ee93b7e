"""``weight``: a frozen parameter baked into the program, possibly stored compressed.

``weight(value, name, scheme[, data, scale, lut])`` has no inputs and yields ``value``: the
values the program computes with (for a compressed weight, the *dequantised* values, which
is also what a JAX reference must use: ``Compressed.value``, rlxjax/compression). ``name`` is the
parameter's pytree path ('params.Dense_0.kernel'); ``scheme`` says how the lowering stores
it (rlxjax/coreml/rules/constexpr.py): ``"none"`` a plain constant, ``"fp16"``, ``"int8"``,
``"int4"``, ``"palettize4"``, ``"palettize8"`` Core ML ``constexpr_*`` ops on the payload
``data`` (fp16 values, quantised integers or LUT indices), ``scale`` (per-channel or
per-block scales) and ``lut`` (the look-up table).

A weight is no ``constant``: constant folding never evaluates it (it has no fold
implementation and no inputs), so nothing computed from it is folded into a plain fp32
constant that would lose the compression or store the weight twice (a transposed copy for
the backward pass); CSE merges two weight nodes only when all their params - the name
included - are equal. No cotangent flows into it (frozen: not differentiable).
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import ARRAY, STR, Param, one_of
from .types import TensorType, dtype_from_numpy

#: storage schemes of a frozen weight (rlxjax/compression/schemes.py computes the payloads)
SCHEMES = ("none", "fp16", "int8", "int4", "palettize4", "palettize8")


@defop("weight", "constant", 0, differentiable=False, params={
    "value": Param(ARRAY, doc="the values the program computes with (dequantised)"),
    "name": Param(STR, doc="the parameter's pytree path"),
    "scheme": Param(one_of(*SCHEMES)),
    "data": Param(ARRAY, required=False, doc="fp16 values / quantised ints / LUT indices"),
    "scale": Param(ARRAY, required=False, doc="int8/int4: scales (rank of value)"),
    "lut": Param(ARRAY, required=False, doc="palettize: the look-up table (fp32)"),
})
def _weight(ts, p):
    v, scheme = p["value"], p["scheme"]
    need = {"none": (), "fp16": ("data",), "int8": ("data", "scale"),
            "int4": ("data", "scale"), "palettize4": ("data", "lut"),
            "palettize8": ("data", "lut")}[scheme]
    for k in need:
        _require(k in p, f"weight '{p['name']}' scheme {scheme} needs parameter {k!r}")
    if scheme != "none":
        _require(v.dtype.kind == "f" and v.ndim >= 1,
                 f"weight '{p['name']}': only float arrays of rank >= 1 are compressed")
        _require(p["data"].shape == v.shape,
                 f"weight '{p['name']}': payload shape {p['data'].shape} != {v.shape}")
    return [TensorType(v.shape, dtype_from_numpy(v.dtype))]
