"""The conv family of RLX ops: ``conv``, lax.conv_general_dilated in canonical layout.

``conv`` [x, w] takes x as [N, C, *spatial] and w as [O, C / feature_groups, *kernel]
(the frontend transposes any ``dimension_numbers`` into this layout, so that the VJP
rules and the lowering deal with one layout only). Parameters, one entry per spatial dim:
  strides, padding ((lo, hi), ...; may be negative), lhs_dilation, rhs_dilation,
and the group counts feature_groups, batch_groups (at most one of them > 1), with JAX's
semantics: the output is [N / batch_groups, O, *out] where out[i] =
floor((dil(S_i, lhs_dilation) + lo + hi - dil(K_i, rhs_dilation)) / stride) + 1 and
dil(n, d) = 1 + d * (n - 1) (0 for n = 0). Groups are always the major part of the
split dimension, as in XLA.
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import INT, INT_PAIRS, INTS, Param
from .types import DType, Dyn, TensorType

def dilate(n: int, d: int) -> int:
    return 0 if n == 0 else 1 + d * (n - 1)


def conv_out_spatial(in_spatial, kernel, p):
    out = []
    for s, k, st, (lo, hi), ld, rd in zip(in_spatial, kernel, p["strides"], p["padding"],
                                          p["lhs_dilation"], p["rhs_dilation"]):
        span = dilate(s, ld) + lo + hi - dilate(k, rd)
        out.append(0 if span < 0 else span // st + 1)
    return out


@defop("conv", "conv", 2, params={
    "strides": Param(INTS), "padding": Param(INT_PAIRS), "lhs_dilation": Param(INTS),
    "rhs_dilation": Param(INTS), "feature_groups": Param(INT), "batch_groups": Param(INT)})
def _conv(ts, p):
    x, w = ts
    _require(x.dtype == w.dtype and x.dtype != DType.bool, f"conv: operands {x} and {w}")
    _require(x.rank == w.rank and x.rank >= 2, f"conv: ranks of {x} and {w} differ or < 2")
    # a flexible batch (docs/flexible.md) is the one dynamic dim a convolution takes
    _require(not any(isinstance(d, Dyn) for d in tuple(x.shape[1:]) + tuple(w.shape)),
             f"conv needs static shapes but a flexible batch, got {x} and {w}")
    ns = x.rank - 2
    for name in ("strides", "padding", "lhs_dilation", "rhs_dilation"):
        _require(len(p[name]) == ns, f"conv: {name} {p[name]} for {ns} spatial dims")
    _require(all(s >= 1 for s in p["strides"] + p["lhs_dilation"] + p["rhs_dilation"]),
             f"conv: strides/dilations must be >= 1: {p}")
    fg, bg = p["feature_groups"], p["batch_groups"]
    _require(fg >= 1 and bg >= 1 and (fg == 1 or bg == 1),
             f"conv: feature_groups {fg}, batch_groups {bg} (at most one may exceed 1)")
    n, c = x.shape[:2]
    o, ci = w.shape[:2]
    _require(c % fg == 0 and ci * fg == c, f"conv: {c} input channels, {fg} feature groups, "
             f"kernel input dim {ci}")
    _require(o % fg == 0, f"conv: {o} output channels not divisible by {fg} feature groups")
    if isinstance(n, Dyn):
        _require(bg == 1, f"conv: batch_groups {bg} over the flexible batch {n}")
    _require((isinstance(n, Dyn) or n % bg == 0) and o % bg == 0,
             f"conv: batch {n} / output channels {o} not divisible by {bg} batch groups")
    out = conv_out_spatial(x.shape[2:], w.shape[2:], p)
    return [TensorType((n if bg == 1 else n // bg, o, *out), x.dtype)]
