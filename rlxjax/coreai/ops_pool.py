"""RLX pool and conv ops -> Core AI, the Core ML lowering's exact compositions
(coreml/rules/pool.py, conv.py) on Core AI ops:

* window reductions (``reduce_window_max`` / ``min`` / ``sum``): window taps (strided
  ``slice``s) combined elementwise, one axis at a time, any window / stride / dilation /
  rank (Core AI's ``maxpool2d`` / ``sumpool2d`` pool the trailing two dims of NCHW only);
  a sum is added tap by tap along each axis (another association than XLA's: a
  rounding-level difference);
* ``select_and_scatter_add`` / ``select_and_gather_add`` (max/min pooling's backward and
  forward-mode): XLA's select over the taps in row-major window order (ties to the first),
  the scatter interleaving the per-tap contributions axis by axis (pad + concat + reshape);
* ``conv``: Core AI's ``conv2d`` / ``conv3d`` (1-D as 2-D with a unit height): padding,
  negative padding and lhs dilation become an explicit zero ``lax.pad`` of the input,
  batch groups become feature groups ([G, N/G, C] -> [N/G, G·C]).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import DType
from ..ir.pool import window_out_shape
from .ops_base import rule, unsupported
from .ops_shape import lax_pad

_COMBINE = {"reduce_window_max": "broadcasting_maximum",
            "reduce_window_min": "broadcasting_minimum", "reduce_window_sum": "broadcasting_add"}


def _tap(ctx, x, offsets, out_shape, strides):
    """x[o_a + i*s_a for i < n_out_a, per axis a] (a strided slice)."""
    begin = [int(o) for o in offsets]
    end = [o + (n - 1) * s + 1 for o, n, s in zip(begin, out_shape, strides)]
    if begin == [0] * len(begin) and set(strides) <= {1} and tuple(end) == ctx.shape(x):
        return x
    return ctx.slice(x, begin, end, list(strides))


@rule(*_COMBINE)
def _reduce_window(ctx, node, ins):
    p, x = node.params, ins[0]
    t = node.inputs[0].type
    if t.dtype == DType.bool:
        raise unsupported(node, "window reductions of bool are not lowered for Core AI")
    rank, shape = t.rank, list(t.shape)
    for a in range(rank):
        k, s, d = p["window"][a], p["strides"][a], p["dilation"][a]
        if k == 1 and s == 1:
            continue
        shape[a] = (shape[a] - (k - 1) * d - 1) // s + 1
        strides = [s if i == a else 1 for i in range(rank)]
        acc = None
        for j in range(k):
            offs = [j * d if i == a else 0 for i in range(rank)]
            tap = _tap(ctx, x, offs, shape, strides)
            acc = tap if acc is None else getattr(ctx.ca, _COMBINE[node.op])(acc, tap)
        x = acc
    return x


def _taps(ctx, operand, shape, p):
    out = window_out_shape(shape, p["window"], p["strides"], p["dilation"])
    offsets = [tuple(j * d for j, d in zip(js, p["dilation"]))
               for js in itertools.product(*(range(k) for k in p["window"]))]
    return out, offsets, [_tap(ctx, operand, o, out, p["strides"]) for o in offsets]


def _choose(ctx, select, taps, values):
    """XLA's select over the taps in order -> (index of the chosen tap (int32, None for
    one tap), the chosen ``values`` entry (None when values is None))."""
    best, idx, val = taps[0], None, (values[0] if values else None)
    for t in range(1, len(taps)):
        keep = ctx.or_(ctx.gt(best, taps[t]) if select == "ge" else ctx.lt(best, taps[t]),
                       ctx.eq(best, taps[t]))
        if t < len(taps) - 1:
            best = ctx.where(keep, best, taps[t])
        if values:
            val = ctx.where(keep, val, values[t])
        else:
            idx = ctx.cast(ctx.ca.not_(keep), DType.i32) if idx is None \
                else ctx.where(keep, idx, ctx.scalar(t, DType.i32))
    return idx, val


@rule("select_and_gather_add")
def _select_and_gather_add(ctx, node, ins):
    tangents, operand = ins
    shape = node.inputs[1].type.shape
    _, _, taps = _taps(ctx, operand, shape, node.params)
    _, _, values = _taps(ctx, tangents, shape, node.params)
    return _choose(ctx, node.params["select"], taps, values)[1]


@rule("select_and_scatter_add")
def _select_and_scatter_add(ctx, node, ins):
    source, operand = ins
    p, t = node.params, node.inputs[1].type
    _, offsets, taps = _taps(ctx, operand, t.shape, p)
    idx, _ = _choose(ctx, p["select"], taps, None)
    zero = ctx.scalar(0, t.dtype)
    parts = {o: source if idx is None else
             ctx.where(ctx.eq(idx, ctx.scalar(k, DType.i32)), source, zero)
             for k, o in enumerate(offsets)}
    for a in range(t.rank):
        parts = _spread_axis(ctx, parts, a, p["strides"][a], t.shape[a], zero, t.dtype)
    (result,) = parts.values()
    return result


def _spread_axis(ctx, parts, axis, s, n, zero, dt):
    """Put per-offset contributions back at their positions along ``axis`` (a part with
    offset q holds the values for positions i*s + q); grouped by their offsets on the other
    axes, returned keyed by offsets with ``axis`` set to 0, ``axis`` now of length n."""
    groups = {}
    for o, v in parts.items():
        groups.setdefault(o[:axis] + (0,) + o[axis + 1:], []).append((o[axis], v))
    return {key: _spread_1d(ctx, items, axis, s, n, zero, dt) for key, items in groups.items()}


def _pad_edges(ctx, x, axis, lo, hi, zero):
    widths = [0] * (2 * len(ctx.shape(x)))
    widths[2 * axis], widths[2 * axis + 1] = lo, hi
    return x if lo == hi == 0 else ctx.ca.pad(x, ctx.u32(widths), zero)


def _spread_1d(ctx, items, axis, s, n, zero, dt):
    n_out = ctx.shape(items[0][1])[axis]
    if len(items) == 1 and items[0][0] == 0 and s == 1:
        return _fit(ctx, items[0][1], axis, n, zero)
    planes = {}  # offset q = m*s + r lands on the residue-r plane, shifted by m windows
    for q, v in items:
        planes.setdefault(q % s, []).append((q // s, v))
    m_max = max(q // s for q, _ in items)
    length = n_out + m_max
    residues = sorted(planes)
    if residues != list(range(len(residues))):
        return _spread_interior(ctx, items, axis, s, n, zero, dt)
    stacked = []
    for r in residues:
        plane = None
        for m, v in planes[r]:
            v = _pad_edges(ctx, v, axis, m, m_max - m, zero)
            plane = v if plane is None else ctx.add(plane, v)
        shape = ctx.shape(plane)
        stacked.append(ctx.reshape(plane, shape[:axis + 1] + (1,) + shape[axis + 1:]))
    inter = stacked[0] if len(stacked) == 1 else \
        ctx.ca.concat(ctx.const(np.int32(axis + 1)), stacked)
    if len(stacked) < s:  # residues with no tap are zero
        inter = _pad_edges(ctx, inter, axis + 1, 0, s - len(stacked), zero)
    shape = ctx.shape(inter)
    merged = shape[:axis] + (length * s,) + shape[axis + 2:]
    return _fit(ctx, ctx.reshape(inter, merged), axis, n, zero)


def _spread_interior(ctx, items, axis, s, n, zero, dt):
    """Offsets whose residues mod s leave gaps (window dilation): one interior pad each."""
    acc = None
    for q, v in items:
        shape = ctx.shape(v)
        cfg = [(0, 0, 0)] * len(shape)
        cfg[axis] = (q, n - q - (shape[axis] - 1) * s - 1, s - 1)
        v = lax_pad(ctx, v, shape, cfg, zero, dt)
        acc = v if acc is None else ctx.add(acc, v)
    return acc


def _fit(ctx, x, axis, n, zero):
    """Crop (only zeros lie past n) or zero-pad ``x`` to length n along ``axis``."""
    shape = ctx.shape(x)
    if shape[axis] > n:
        end = list(shape)
        end[axis] = n
        return ctx.slice(x, [0] * len(shape), end)
    return _pad_edges(ctx, x, axis, 0, n - shape[axis], zero) if shape[axis] < n else x


# -- conv --------------------------------------------------------------------------------
def conv_layout(ctx, node, x, dt):
    """The conv's input with batch groups as feature groups and its padding and lhs
    dilation as an explicit zero ``lax.pad`` -> (x, its shape, feature groups)."""
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
        x = _padded(ctx, x, xs, [(0, 0, 0), (0, 0, 0)] + cfg, dt)
        xs = list(ctx.shape(x))
    return x, xs, groups


def _padded(ctx, x, xs, cfg, dt):
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
    out = lax_pad(ctx, x, xs, cfg, ctx.scalar(0, dt), dt)
    ctx.padded[key] = (root, out, tuple(perm))
    return out


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
    x, xs, groups = conv_layout(ctx, node, x, DType.f32)
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
    on real samples (a strided slice of the kernel), interleaved by one concat + transpose.
    The same products and sums as the dilated form without its zero samples (XLA's
    semantics: no zero sample times a tap, so an inf input stays inf, not NaN), at 1/s^2 of
    its work and without the dilated input's gather (bench/coreai_speed.py: the CNN's
    stride-2 input gradient)."""
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
    zero, one = ctx.scalar(0, DType.f32), ctx.u32([1, 1])
    groups = ctx.const(np.uint32(p["feature_groups"]))
    n, o = xs[0], ws[0]
    outs = []
    for (th, mh, ch), (tw, mw, cw) in itertools.product(taps_h, taps_w):
        k = ctx.slice(w, [0, 0, th, tw], [ws[0], ws[1], th + (mh - 1) * s[0] + 1,
                                            tw + (mw - 1) * s[1] + 1], [1, 1, s[0], s[1]])
        cfg = [(0, 0, 0), (0, 0, 0), (-ch, uh + mh - 1 - xs[2] + ch, 0),
               (-cw, uw + mw - 1 - xs[3] + cw, 0)]
        xp = lax_pad(ctx, x, xs, cfg, zero, DType.f32)
        y = ctx.ca.conv2d(xp, k, one, one, groups)  # (n, o, uh, uw)
        outs.append(ctx.reshape(y, [n, 1, o * uh * uw]))
    y = outs[0] if len(outs) == 1 else ctx.ca.concat(ctx.const(np.int32(1)), outs)
    y = ctx.reshape(y, [n, s[0], s[1], o, uh, uw])
    y = ctx.transpose(y, [0, 3, 4, 1, 5, 2])
    y = ctx.reshape(y, [n, o, uh * s[0], uw * s[1]])
    if (uh * s[0], uw * s[1]) != (nh, nw):
        y = ctx.slice(y, [0, 0, 0, 0], [n, o, nh, nw])
    return ctx.reshape(y, out_t.shape) if xt.rank == 3 else y
