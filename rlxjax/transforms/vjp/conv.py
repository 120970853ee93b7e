"""VJP rules: conv (canonical layout; the maths of JAX's conv_general_dilated transpose).

Forward y = conv(x, w): x [N, C, *S], w [O, C/G, *K], y [N/B, O, *S'] with G feature
groups or B batch groups (H = G * B, at most one of them > 1).

dx is a convolution of the cotangent with the spatially flipped kernel whose in/out
feature roles are swapped (within each group), the forward stride becoming lhs dilation
and the forward lhs dilation the stride; padding lo = K_dil - 1 - lo_fwd, hi chosen so
that the result has x's size. With batch groups the result comes out as [N/B, B*C, *S]
and the B slices go back into the batch dim.

dw is a convolution of x with the cotangent, batch and feature roles swapped in both
(x^T [C, N, *S] as input, ct^T [O, N/B, *S'] as kernel); the forward stride becomes the
rhs dilation, feature groups become batch groups and vice versa.
"""
from __future__ import annotations

from ...ir.conv import dilate
from .registry import vjp_rule


def _swap01(ctx, v):
    return ctx.add("transpose", v, perm=(1, 0, *range(2, v.type.rank)))


def _dilated(p, x_spatial, k_spatial, y_spatial):
    """(input, kernel, output) spatial sizes after lhs dilation, rhs dilation, stride."""
    return ([dilate(s, d) for s, d in zip(x_spatial, p["lhs_dilation"])],
            [dilate(k, d) for k, d in zip(k_spatial, p["rhs_dilation"])],
            [dilate(s, d) for s, d in zip(y_spatial, p["strides"])])


def _lhs_ct(ctx, ct, x, w, p):
    groups = p["feature_groups"] * p["batch_groups"]
    o, cw, *k = w.shape
    ns = len(k)
    wt = ctx.reshape(w, (groups, o // groups, cw, *k))
    wt = ctx.add("transpose", wt, perm=(0, 2, 1, *range(3, 3 + ns)))
    wt = ctx.reshape(wt, (groups * cw, o // groups, *k))
    wt = ctx.add("rev", wt, axes=tuple(range(2, 2 + ns)))
    in_d, k_d, out_d = _dilated(p, x.shape[2:], k, ct.shape[2:])
    padding = []
    for (lo, _), i, kk, oo in zip(p["padding"], in_d, k_d, out_d):
        before = kk - 1 - lo
        padding.append((before, i + kk - 1 - oo - before))
    dx = ctx.add("conv", ct, wt, strides=p["lhs_dilation"], padding=tuple(padding),
                 lhs_dilation=p["strides"], rhs_dilation=p["rhs_dilation"],
                 feature_groups=groups, batch_groups=1)
    b = p["batch_groups"]
    if b == 1:
        return dx
    n, c, *s = x.shape
    dx = ctx.reshape(dx, (n // b, b, c, *s))
    dx = ctx.add("transpose", dx, perm=(1, 0, *range(2, dx.type.rank)))
    return ctx.reshape(dx, (n, c, *s))


def _rhs_ct(ctx, ct, x, w, p):
    in_d, k_d, out_d = _dilated(p, x.shape[2:], w.shape[2:], ct.shape[2:])
    padding = tuple((lo, oo - i + kk - lo - 1)
                    for (lo, _), i, kk, oo in zip(p["padding"], in_d, k_d, out_d))
    r = ctx.add("conv", _swap01(ctx, x), _swap01(ctx, ct), strides=p["rhs_dilation"],
                padding=padding, lhs_dilation=p["lhs_dilation"], rhs_dilation=p["strides"],
                feature_groups=p["batch_groups"], batch_groups=p["feature_groups"])
    return _swap01(ctx, r)


@vjp_rule("conv")
def _conv(ctx, node, cts, needs):
    (ct,), (x, w), p = cts, node.inputs, node.params
    if ct is None:
        return [None, None]
    return [_lhs_ct(ctx, ct, x, w, p) if needs[0] else None,
            _rhs_ct(ctx, ct, x, w, p) if needs[1] else None]
