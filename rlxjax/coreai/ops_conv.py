"""RLX ``conv`` -> Core AI's ``conv2d`` / ``conv3d`` (1-D as 2-D with a unit height):
padding, negative padding and lhs dilation become an explicit zero padding of the input
(``zero_pad``: the input written into a zero constant by one ``slice_update``), batch
groups become feature groups ([G, N/G, C] -> [N/G, G·C]). (The pool family is decomposed
in the RLX graph before the rules run: rlxjax/transforms/legalize/pool.py.)
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import DType
from . import ca_private
from .ops_base import rule, unsupported


def conv_layout(ctx, node, x):
    """The conv's input with batch groups as feature groups and its padding and lhs
    dilation as an explicit zero padding (``zero_pad``) -> (x, its shape, feature
    groups)."""
    p, xt = node.params, node.inputs[0].type
    groups = p["feature_groups"]
    xs = list(xt.shape)
    if p["batch_groups"] > 1:  # [G, N/G, C, *S] -> [N/G, G*C, *S]
        g = p["batch_groups"]
        n, c, sp = xs[0], xs[1], xs[2:]
        x = ctx.reshape(x, [g, n // g, c] + sp)
        x = ctx.transpose(x, [1, 0] + list(range(2, 3 + len(sp))))
        xs = [n // g, g * c] + sp
        x = ctx.reshape(x, xs)
        groups = g
    cfg = [(lo, hi, d - 1) for (lo, hi), d in zip(p["padding"], p["lhs_dilation"])]
    if any(c != (0, 0, 0) for c in cfg):  # explicit zero padding of the spatial dims
        x = _padded(ctx, x, xs, [(0, 0, 0), (0, 0, 0)] + cfg)
        xs = list(ctx.shape(x))
    return x, xs, groups


def _padded(ctx, x, xs, cfg):
    """``x`` zero-padded by ``cfg`` (its leading two dims unpadded). A value padded so
    before as another transpose of the same tensor, with the spatial dims in place (a
    conv's input, then the same input as its kernel gradient's [C, N, ...] operand), is
    that padded tensor transposed: a transpose instead of a gather, a where and the
    gather index's broadcast (padding moves with a transpose of the dims it leaves
    alone)."""
    root, perm = ctx.source(x)
    spatial = tuple(range(2, len(xs)))
    key = (id(root), tuple(perm[a] for a in spatial), tuple(map(tuple, cfg)))
    hit = ctx.padded.get(key)
    if hit is not None and hit[0] is root:
        _, padded, before = hit  # padded = pad(root transposed by ``before``)
        q = [before.index(perm[i]) for i in range(len(perm))]
        if all(q[a] == a for a in spatial):
            return ctx.transpose(padded, q)
    out = zero_pad(ctx, x, xs, cfg)
    ctx.padded[key] = (root, out, tuple(perm))
    return out


def zero_pad(ctx, x, xs, cfg):
    """The f32 ``x`` (of shape ``xs``) zero-padded by ``cfg`` ((lo, hi, interior) per axis,
    negative edges crop, as ``lax.pad``): the samples kept (a ``slice`` where an edge
    crops) written into a zero constant of the result's shape (a splat: one value in the
    asset) by one ``slice_update``, strided by interior + 1. Core AI has no padding on its
    ``conv2d``; on its runtime this costs about half the ``gather_along_axis`` + ``where``
    (+ the index's ``broadcast_in_dims``) of ``lax_pad`` and a tenth of its ``pad`` op
    (a 32x32x28x28 input, bench/RESULTS.md). Exact: the samples are copied, every other
    element is +0.0."""
    out_shape, first, last, start, stride = [], [], [], [], []
    for d, (lo, hi, k) in zip(xs, cfg):
        step = k + 1
        dl = d + (d - 1) * k  # the dilated extent
        n = lo + dl + hi
        i0 = -(-max(-lo, 0) // step)  # the first sample kept, at or after the low crop
        i1 = (dl - 1 + min(hi, 0)) // step  # the last, at or before the high crop
        out_shape.append(n)
        first.append(i0)
        last.append(i1)
        start.append(i0 * step + lo)
        stride.append(step)
    zeros = ca_private.splat(np.float32(0), out_shape)
    if any(i1 < i0 for i0, i1 in zip(first, last)):  # every sample cropped: all padding
        return zeros
    if first != [0] * len(xs) or [i + 1 for i in last] != list(xs):
        x = ctx.slice(x, first, [i + 1 for i in last])
    end = [s + (i1 - i0) * st + 1 for s, i0, i1, st in zip(start, first, last, stride)]
    return ctx.ca.slice_update(zeros, ctx.i32(start), ctx.i32(end), ctx.i32(stride), x)


@rule("conv")
def _conv(ctx, node, ins):
    x, w = ins
    p = node.params
    xt, wt, out_t = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    # fp16 values: in their fp32 carriers, rounded once (as XLA:CPU); not in Core AI fp16
    if xt.dtype != DType.f32 and not (xt.dtype == DType.f16 and not ctx.native_f16):
        raise unsupported(node, f"{xt.dtype} convolutions are not lowered for Core AI yet")
    nsp = xt.rank - 2
    if nsp not in (1, 2, 3):
        raise unsupported(node, f"{nsp}-d convolutions are not lowered for Core AI")
    if nsp in (1, 2) and _phased(p, xt.shape[2:], wt.shape[2:]):
        return _conv_phases(ctx, node, x, w)
    x, xs, groups = conv_layout(ctx, node, x)
    strides, dil, ws = list(p["strides"]), list(p["rhs_dilation"]), list(wt.shape)
    if nsp == 1:  # as 2-D with a unit height
        x, w = ctx.reshape(x, xs[:2] + [1] + xs[2:]), ctx.reshape(w, ws[:2] + [1] + ws[2:])
        strides, dil = [1] + strides, [1] + dil
    conv = ctx.ca.conv3d if nsp == 3 else ctx.ca.conv2d
    y = conv(x, w, ctx.u32(strides), ctx.u32(dil), ctx.const(np.uint32(groups)))
    return ctx.reshape(y, out_t.shape) if nsp == 1 else y


# -- input dilation as phases --------------------------------------------------------------
def _phase_taps(n_in, s, k, lo, hi):
    """One axis of a conv whose input is dilated by ``s`` (stride 1, no kernel dilation):
    per output phase ph (outputs s*u + ph), (first tap, taps, the input offset of u = 0),
    and U, the outputs per phase (the longest phase's count)."""
    n_out = (n_in - 1) * s + 1 + lo + hi - k + 1
    out = []
    for ph in range(s):
        t0 = (lo - ph) % s
        out.append((t0, len(range(t0, k, s)), (ph + t0 - lo) // s))
    return out, -(-n_out // s), n_out


def _phased(p, in_sp, k_sp) -> bool:
    """A conv run as one stride-1 conv per output phase: its input dilated (the input
    gradient of a strided conv), no window stride, kernel dilation or batch groups, every
    phase with at least one tap (a tap-less phase is all padding: the dilated form)."""
    s = list(p["lhs_dilation"])
    if max(s) <= 1 or set(p["strides"]) != {1} or set(p["rhs_dilation"]) != {1} \
            or p["batch_groups"] != 1:
        return False
    for n, si, k, (lo, hi) in zip(in_sp, s, k_sp, p["padding"]):
        taps, u, n_out = _phase_taps(n, si, k, lo, hi)
        if n_out <= 0 or any(m == 0 or c > n or c + u + m - 1 < 0 for _, m, c in taps):
            return False
    return True


def _conv_phases(ctx, node, x, w):
    """A conv of an input dilated by s (zeros between its samples) as s_h*s_w stride-1
    convs of the undilated input, one per output phase, each with the kernel taps that land
    on real samples (a strided slice of the kernel), each written into its phase of the
    output by a strided ``slice_update`` (less than half the time of a concat + transpose
    interleave on the runtime, bench/RESULTS.md). The same products and sums as the
    dilated form without its zero samples (XLA's semantics: no zero sample times a tap, so
    an inf input stays inf, not NaN), at 1/s^2 of its work and without the dilated input's
    padding (bench/coreai_speed.py: the CNN's stride-2 input gradient)."""
    p, xt, wt = node.params, node.inputs[0].type, node.inputs[1].type
    out_t = node.outputs[0].type
    xs, ws = list(xt.shape), list(wt.shape)
    if xt.rank == 3:  # 1-D as 2-D with a unit height
        x, w = ctx.reshape(x, xs[:2] + [1] + xs[2:]), ctx.reshape(w, ws[:2] + [1] + ws[2:])
        xs, ws = xs[:2] + [1] + xs[2:], ws[:2] + [1] + ws[2:]
        s, pads = [1] + list(p["lhs_dilation"]), [(0, 0)] + list(p["padding"])
    else:
        s, pads = list(p["lhs_dilation"]), list(p["padding"])
    axes = [_phase_taps(n, si, k, lo, hi) for n, si, k, (lo, hi) in
            zip(xs[2:], s, ws[2:], pads)]
    (taps_h, uh, nh), (taps_w, uw, nw) = axes
    one = ctx.u32([1, 1])
    groups = ctx.const(np.uint32(p["feature_groups"]))
    n, o = xs[0], ws[0]
    out = ca_private.splat(np.float32(0), [n, o, nh, nw])
    for (ph, (th, mh, ch)), (pw, (tw, mw, cw)) in itertools.product(enumerate(taps_h),
                                                                     enumerate(taps_w)):
        k = ctx.slice(w, [0, 0, th, tw], [ws[0], ws[1], th + (mh - 1) * s[0] + 1,
                                            tw + (mw - 1) * s[1] + 1], [1, 1, s[0], s[1]])
        cfg = [(0, 0, 0), (0, 0, 0), (-ch, uh + mh - 1 - xs[2] + ch, 0),
               (-cw, uw + mw - 1 - xs[3] + cw, 0)]
        xp = zero_pad(ctx, x, xs, cfg)
        y = ctx.ca.conv2d(xp, k, one, one, groups)  # (n, o, uh, uw): outputs s*u + ph
        mh_, mw_ = len(range(ph, nh, s[0])), len(range(pw, nw, s[1]))  # this phase's outputs
        if (mh_, mw_) != (uh, uw):
            y = ctx.slice(y, [0, 0, 0, 0], [n, o, mh_, mw_])
        out = ctx.ca.slice_update(out, ctx.i32([0, 0, ph, pw]),
                                  ctx.i32([n, o, ph + (mh_ - 1) * s[0] + 1,
                                           pw + (mw_ - 1) * s[1] + 1]),
                                  ctx.i32([1, 1, s[0], s[1]]), y)
    return ctx.reshape(out, out_t.shape) if xt.rank == 3 else out
