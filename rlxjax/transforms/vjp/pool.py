"""VJP rules: the pool family (windowed reductions without padding; the frontend's ``pad``
in front of them carries the padding's own rule).

JAX's conventions: max/min pooling sends each window's cotangent to the FIRST maximal
(minimal) element of the window in row-major window order (XLA's select_and_scatter with
``ge`` / ``le``), not shared among ties as ``reduce_max`` does.
"""
from __future__ import annotations

from ...ir import Dyn
from .registry import vjp_rule


def _window(p):
    return dict(window=p["window"], strides=p["strides"], dilation=p["dilation"])


@vjp_rule("reduce_window_sum")
def _reduce_window_sum(ctx, node, cts, needs):
    # x[i*s + j*d] feeds out[i]: dilate the cotangent by s, pad (k-1)*d in front and the
    # rest behind, then a stride-1 window sum of the same window (JAX's transpose rule).
    (ct,), (x,), p = cts, node.inputs, node.params
    cfg = []
    for n, n_out, k, s, d in zip(x.shape, ct.shape, p["window"], p["strides"], p["dilation"]):
        if isinstance(n, Dyn):  # a flexible axis: windows of one (ir/pool.py), nothing to pad
            cfg.append((0, 0, 0))
            continue
        cfg.append(((k - 1) * d, n - (n_out - 1) * s - 1, s - 1))
    padded = ct
    if any(c != (0, 0, 0) for c in cfg):
        padded = ctx.add("pad", ct, ctx.scalar(0.0, ct), config=tuple(cfg))
    if set(p["window"]) == {1}:
        return [padded]
    ones = (1,) * x.type.rank
    return [ctx.add("reduce_window_sum", padded, window=p["window"], strides=ones,
                    dilation=p["dilation"])]


@vjp_rule("reduce_window_max", "reduce_window_min")
def _reduce_window_chooser(ctx, node, cts, needs):
    (ct,), (x,) = cts, node.inputs
    sel = "ge" if node.op == "reduce_window_max" else "le"
    return [ctx.add("select_and_scatter_add", ct, x, select=sel, **_window(node.params))]


@vjp_rule("select_and_scatter_add")
def _select_and_scatter_add(ctx, node, cts, needs):
    # Linear in the source; the selection is piecewise constant in the operand (JAX gives
    # the operand no cotangent either). The transpose of a scatter is the gather.
    (ct,), (_, operand), p = cts, node.inputs, node.params
    src = None
    if needs[0]:
        src = ctx.add("select_and_gather_add", ct, operand, select=p["select"],
                      **_window(p))
    return [src, None]


@vjp_rule("select_and_gather_add")
def _select_and_gather_add(ctx, node, cts, needs):
    (ct,), (_, operand), p = cts, node.inputs, node.params
    tan = None
    if needs[0]:
        tan = ctx.add("select_and_scatter_add", ct, operand, select=p["select"],
                      **_window(p))
    return [tan, None]
