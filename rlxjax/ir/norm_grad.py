"""The norm_grad family of RLX ops: the backward of each forward norm (rlxjax.ir.norm).

Each op takes the forward operands it needs plus the output cotangent ``dy`` (last input)
and returns several gradients as separate outputs. The ``outputs`` parameter lists which
ones, in the op's canonical order (e.g. ``("dx", "dgamma")`` of
``("dx", "dgamma", "dbeta")``): the grad transform asks only for what it needs, and the
lowering computes nothing else.

  layer_norm_grad, rms_norm_grad    [x, gamma?, dy]          dx, dgamma, dbeta
  group_norm_grad, layer_norm2d_grad,
  batch_norm_train_grad             [x, gamma?, dy]          dx, dgamma, dbeta
  batch_norm_grad                   [x, gamma?, mean, var, dy]  dx, dgamma, dbeta, dmean, dvar
  ada_layer_norm_grad               [x, scale, dy]           dx, dscale, dshift
  gated_residual_grad               [y, gate, dy]            dy, dgate

Parameters are the forward op's (minus ``has_beta``: beta is additive and absent from
every formula; ``momentum``: the running-stat outputs are handled by the VJP rule), plus
``shift_shape`` for ada_layer_norm_grad (shift itself is not an input).
"""
from __future__ import annotations

from .ops import _require, broadcast_shapes, defop
from .norm import PARAMS as FORWARD_PARAMS
from .schema import DIMS, STRS, Param
from .types import TensorType

AFFINE_GRADS = ("dx", "dgamma", "dbeta")
BATCH_NORM_GRADS = AFFINE_GRADS + ("dmean", "dvar")
ADA_GRADS = ("dx", "dscale", "dshift")
GATED_GRADS = ("dy", "dgate")


def _schema(forward, **extra):
    """The forward op's params minus has_beta and momentum, plus ``outputs``."""
    kept = {k: v for k, v in FORWARD_PARAMS[forward].items() if k not in ("has_beta", "momentum")}
    return {**kept, "outputs": Param(STRS), **extra}


def _selected(p, allowed, op):
    outs = p["outputs"]
    _require(isinstance(outs, tuple) and len(outs) > 0, f"{op}: outputs must be a non-empty tuple")
    _require(set(outs) <= set(allowed), f"{op}: outputs {outs} not among {allowed}")
    _require(list(outs) == [n for n in allowed if n in outs],
             f"{op}: outputs {outs} must be distinct and in the order {allowed}")
    return outs


def _split(ts, p, op, n_stats=0):
    """[x, gamma?, *stats, dy] -> x, gamma-or-None, stats, dy (checked against x)."""
    _require(len(ts) == 2 + int(p["has_gamma"]) + n_stats,
             f"{op}: expected x, {'gamma, ' if p['has_gamma'] else ''}{n_stats} stats and dy, "
             f"got {len(ts)} inputs")
    x, dy = ts[0], ts[-1]
    gamma = ts[1] if p["has_gamma"] else None
    stats = list(ts[1 + int(p["has_gamma"]):-1])
    _require(x.dtype.is_float, f"{op} needs a float input, got {x}")
    _require(dy == x, f"{op}: cotangent {dy} differs from x {x}")
    return x, gamma, stats, dy


def _check(name, t, x, shape, op):
    if t is None:
        return
    _require(t.dtype == x.dtype, f"{op}: {name} dtype {t.dtype} differs from x {x.dtype}")
    _require(tuple(t.shape) == tuple(shape), f"{op}: {name} shape {t.shape} != {tuple(shape)}")


def _affine_types(x, pshape, outs, allowed=AFFINE_GRADS):
    """dx has x's type, every other gradient the per-parameter shape ``pshape``."""
    by_name = {n: (x if n == "dx" else x.with_shape(pshape)) for n in allowed}
    return [by_name[n] for n in outs]


for _name in ("layer_norm_grad", "rms_norm_grad"):

    @defop(_name, "norm_grad", None, params=_schema(_name[:-len("_grad")]))
    def _trailing_grad(ts, p, _name=_name):
        outs = _selected(p, AFFINE_GRADS, _name)
        x, g, _, _ = _split(ts, p, _name)
        _require(0 <= p["axis"] < max(x.rank, 1), f"{_name}: axis {p['axis']} for {x}")
        pshape = x.shape[p["axis"]:]
        _check("gamma", g, x, pshape, _name)
        return _affine_types(x, pshape, outs)


@defop("group_norm_grad", "norm_grad", None, params=_schema("group_norm"))
def _group_norm_grad(ts, p):
    outs = _selected(p, AFFINE_GRADS, "group_norm_grad")
    x, g, _, _ = _split(ts, p, "group_norm_grad")
    c = p["channel_axis"]
    _require(x.rank >= 2 and 1 <= c < x.rank, f"group_norm_grad: channel axis {c} for {x}")
    _require(x.shape[c] % p["num_groups"] == 0,
             f"group_norm_grad: {p['num_groups']} groups do not divide {x.shape[c]} channels")
    _check("gamma", g, x, (x.shape[c],), "group_norm_grad")
    return _affine_types(x, (x.shape[c],), outs)


@defop("layer_norm2d_grad", "norm_grad", None, params=_schema("layer_norm2d"))
def _layer_norm2d_grad(ts, p):
    outs = _selected(p, AFFINE_GRADS, "layer_norm2d_grad")
    x, g, _, _ = _split(ts, p, "layer_norm2d_grad")
    _require(x.rank >= 3, f"layer_norm2d_grad needs NCHW-like rank >= 3, got {x}")
    _check("gamma", g, x, (x.shape[1],), "layer_norm2d_grad")
    return _affine_types(x, (x.shape[1],), outs)


@defop("batch_norm_train_grad", "norm_grad", None,
       params=_schema("batch_norm_train"))
def _batch_norm_train_grad(ts, p):
    outs = _selected(p, AFFINE_GRADS, "batch_norm_train_grad")
    x, g, _, _ = _split(ts, p, "batch_norm_train_grad")
    _require(0 <= p["axis"] < x.rank, f"batch_norm_train_grad: axis {p['axis']} for {x}")
    _check("gamma", g, x, (x.shape[p["axis"]],), "batch_norm_train_grad")
    return _affine_types(x, (x.shape[p["axis"]],), outs)


@defop("batch_norm_grad", "norm_grad", None, params=_schema("batch_norm"))
def _batch_norm_grad(ts, p):
    outs = _selected(p, BATCH_NORM_GRADS, "batch_norm_grad")
    x, g, (mean, var), _ = _split(ts, p, "batch_norm_grad", 2)
    _require(0 <= p["axis"] < x.rank, f"batch_norm_grad: axis {p['axis']} for {x}")
    c = (x.shape[p["axis"]],)
    for name, t in (("gamma", g), ("mean", mean), ("var", var)):
        _check(name, t, x, c, "batch_norm_grad")
    return _affine_types(x, c, outs, BATCH_NORM_GRADS)


@defop("ada_layer_norm_grad", "norm_grad", 3,
       params=_schema("ada_layer_norm", shift_shape=Param(DIMS)))
def _ada_layer_norm_grad(ts, p):
    outs = _selected(p, ADA_GRADS, "ada_layer_norm_grad")
    x, scale, dy = ts
    _require(x.dtype.is_float and dy == x, f"ada_layer_norm_grad: cotangent {dy} vs x {x}")
    _require(p["kind"] in ("layer", "rms"), f"ada_layer_norm_grad kind {p['kind']!r}")
    shift = TensorType(p["shift_shape"], x.dtype)
    for name, t in (("scale", scale), ("shift", shift)):
        _require(t.dtype == x.dtype, f"ada_layer_norm_grad: {name} dtype {t.dtype} vs {x}")
        _require(broadcast_shapes(x.shape, t.shape) == tuple(x.shape),
                 f"ada_layer_norm_grad: {name} {t} does not broadcast to {x}")
    by_name = {"dx": x, "dscale": scale, "dshift": shift}
    return [by_name[n] for n in outs]


@defop("gated_residual_grad", "norm_grad", 3, params=_schema("gated_residual"))
def _gated_residual_grad(ts, p):
    outs = _selected(p, GATED_GRADS, "gated_residual_grad")
    y, gate, dy = ts
    _require(dy == y and y.dtype.is_float, f"gated_residual_grad: cotangent {dy} vs y {y}")
    _require(gate.dtype == y.dtype and broadcast_shapes(y.shape, gate.shape) == tuple(y.shape),
             f"gated_residual_grad: gate {gate} does not broadcast to {y}")
    by_name = {"dy": y, "dgate": gate}
    return [by_name[n] for n in outs]
