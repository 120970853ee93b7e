"""conv (coremltools iOS15/iOS17 conv.py).

x [N, C_in, *D], weight [C_out, C_in / groups, *K], optional bias [C_out]; 1 to 3 spatial
dims. Output [N, C_out, *D_out], D_out[i] = floor((D[i] + pad_lo + pad_hi - (K[i] - 1) *
dilations[i] - 1) / strides[i]) + 1. Group g maps input channels [g*C_in/groups, ...) to
output channels [g*C_out/groups, ...).

Only pad_type "valid" and "custom" are implemented: the op definition describes "same"
in two ways that disagree (a stride-free formula in its docstring, a stride-dependent one
in its type inference), rlxjax never emits it, and guessing is not an option here.

coremltools has no value_inference for conv; tests/frontend/test_conv.py checks this
implementation against jax.lax.conv_general_dilated. fp16 sums accumulate in fp32 and are
rounded once (see linear.py).
"""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import acc_dtype, get, out, to_int, to_int_list


def _pads(inputs, n_spatial):
    pad_type = str(get(inputs, "pad_type", "valid"))
    if pad_type == "valid":
        return [(0, 0)] * n_spatial
    if pad_type == "custom":
        pad = to_int_list(get(inputs, "pad", [0] * 2 * n_spatial))
        if len(pad) != 2 * n_spatial or any(v < 0 for v in pad):
            raise ValueError(f"conv: bad pad {pad} for {n_spatial} spatial dims")
        return list(zip(pad[::2], pad[1::2]))
    raise NotImplementedError(f"conv pad_type {pad_type!r} is not implemented by the "
                              "reference interpreter (rlxjax emits 'custom')")


@register("conv")
def conv(inputs):
    x, w = np.asarray(inputs["x"]), np.asarray(inputs["weight"])
    ns = x.ndim - 2
    if not 1 <= ns <= 3 or w.ndim != x.ndim:
        raise ValueError(f"conv: x {x.shape} and weight {w.shape}")
    for a, what in ((x, "x"), (w, "weight")):
        if a.dtype not in (np.float16, np.float32):
            raise TypeError(f"conv: {what} has dtype {a.dtype}")
    strides = to_int_list(get(inputs, "strides", [1] * ns))
    dil = to_int_list(get(inputs, "dilations", [1] * ns))
    groups = to_int(get(inputs, "groups", 1))
    n, c = x.shape[:2]
    o, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    if c % groups or c // groups != cg or o % groups or len(strides) != ns or len(dil) != ns:
        raise ValueError(f"conv: x {x.shape}, weight {w.shape}, groups {groups}, "
                         f"strides {strides}, dilations {dil}")
    acc = np.promote_types(acc_dtype(x.dtype), acc_dtype(w.dtype))
    xp = np.pad(x.astype(acc), [(0, 0), (0, 0)] + _pads(inputs, ns))
    out_sp = [(xp.shape[2 + i] - (kernel[i] - 1) * dil[i] - 1) // strides[i] + 1
              for i in range(ns)]
    if any(d <= 0 for d in out_sp):
        raise ValueError(f"conv: empty output {out_sp} for x {x.shape}, weight {w.shape}")
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = w.astype(acc).reshape(groups, o // groups, cg, *kernel)
    res = np.zeros((n, groups, o // groups, *out_sp), acc)
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * d, t * d + (m - 1) * s + 1, s)
                       for t, d, m, s in zip(tap, dil, out_sp, strides))
        patch = xg[(slice(None),) * 3 + window]  # [n, groups, cg, *out_sp]
        res += np.einsum("ngc...,goc->ngo...", patch, wg[(Ellipsis,) + tap])
    res = res.reshape(n, o, *out_sp)
    bias = inputs.get("bias")
    if bias is not None:
        res = res + np.asarray(bias).astype(acc).reshape((o,) + (1,) * ns)
    # The output takes x's dtype (iOS17 lets weight/bias have another float dtype).
    return (out(res, x.dtype),)
