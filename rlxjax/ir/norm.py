"""The norm family of RLX ops (forward): type inference.

Optional affine operands are listed in the inputs only when present; ``has_gamma`` and
``has_beta`` say which are there, so inputs are ``[x, gamma?, beta?, ...]``. Each record
names its backward op (``backward``, defined in rlxjax/ir/norm_grad.py), which its VJP rule
(transforms/vjp/norm.py) emits.
"""
from __future__ import annotations

import numpy as np

from .ops import _require, broadcast_shapes, defop
from .schema import BOOL, FLOAT, INT, Param, one_of

_AFFINE = {"eps": Param(FLOAT), "has_gamma": Param(BOOL), "has_beta": Param(BOOL)}
PARAMS = {
    "layer_norm": {"axis": Param(INT), **_AFFINE},
    "rms_norm": {"axis": Param(INT), **_AFFINE},
    "group_norm": {"num_groups": Param(INT), "channel_axis": Param(INT), **_AFFINE},
    "batch_norm": {"axis": Param(INT), **_AFFINE},
    "batch_norm_train": {"axis": Param(INT), "momentum": Param(FLOAT), **_AFFINE},
    "layer_norm2d": dict(_AFFINE),
    "ada_layer_norm": {"kind": Param(one_of("layer", "rms")), "eps": Param(FLOAT)},
    "gated_residual": {},
}


def _split_affine(ts, p, n_after=0):
    """-> x, gamma-or-None, beta-or-None, remaining inputs."""
    x, rest = ts[0], list(ts[1:])
    gamma = rest.pop(0) if p["has_gamma"] else None
    beta = rest.pop(0) if p["has_beta"] else None
    _require(len(rest) == n_after, f"expected {n_after} more inputs, got {len(rest)}")
    return x, gamma, beta, rest


def _check_param(name, t, x, shape):
    if t is None:
        return
    _require(t.dtype == x.dtype, f"{name} dtype {t.dtype} differs from x {x.dtype}")
    _require(tuple(t.shape) == tuple(shape), f"{name} shape {t.shape} != {tuple(shape)}")


def _float_x(x, op):
    _require(x.dtype.is_float, f"{op} needs a float input, got {x}")


for _name, _backward in (("layer_norm", "layer_norm_grad"), ("rms_norm", "rms_norm_grad")):

    @defop(_name, "norm", None, params=PARAMS[_name], backward=(_backward,))
    def _trailing_norm(ts, p, _name=_name):
        x, g, b, _ = _split_affine(ts, p)
        _float_x(x, _name)
        _require(0 <= p["axis"] < max(x.rank, 1), f"{_name}: axis {p['axis']} for {x}")
        _check_param("gamma", g, x, x.shape[p["axis"]:])
        _check_param("beta", b, x, x.shape[p["axis"]:])
        return [x]


@defop("group_norm", "norm", None, params=PARAMS["group_norm"], backward=("group_norm_grad",))
def _group_norm(ts, p):
    x, g, b, _ = _split_affine(ts, p)
    _float_x(x, "group_norm")
    c = p["channel_axis"]
    _require(x.rank >= 2 and 1 <= c < x.rank, f"group_norm: channel axis {c} for {x}")
    _require(x.shape[c] % p["num_groups"] == 0,
             f"group_norm: {p['num_groups']} groups do not divide {x.shape[c]} channels")
    _check_param("gamma", g, x, (x.shape[c],))
    _check_param("beta", b, x, (x.shape[c],))
    return [x]


@defop("batch_norm", "norm", None, params=PARAMS["batch_norm"], backward=("batch_norm_grad",))
def _batch_norm(ts, p):
    x, g, b, (mean, var) = _split_affine(ts, p, 2)
    _float_x(x, "batch_norm")
    _require(0 <= p["axis"] < x.rank, f"batch_norm: axis {p['axis']} for {x}")
    for name, t in (("gamma", g), ("beta", b), ("mean", mean), ("var", var)):
        _check_param(name, t, x, (x.shape[p["axis"]],))
    return [x]


@defop("batch_norm_train", "norm", None, params=PARAMS["batch_norm_train"],
       backward=("batch_norm_train_grad",))
def _batch_norm_train(ts, p):
    x, g, b, (rmean, rvar) = _split_affine(ts, p, 2)
    _float_x(x, "batch_norm_train")
    _require(0 <= p["axis"] < x.rank, f"batch_norm_train: axis {p['axis']} for {x}")
    c = (x.shape[p["axis"]],)
    for name, t in (("gamma", g), ("beta", b), ("running_mean", rmean), ("running_var", rvar)):
        _check_param(name, t, x, c)
    return [x, rmean, rvar]


@defop("layer_norm2d", "norm", None, params=PARAMS["layer_norm2d"],
       backward=("layer_norm2d_grad",))
def _layer_norm2d(ts, p):
    x, g, b, _ = _split_affine(ts, p)
    _float_x(x, "layer_norm2d")
    _require(x.rank >= 3, f"layer_norm2d needs NCHW-like rank >= 3, got {x}")
    _check_param("gamma", g, x, (x.shape[1],))
    _check_param("beta", b, x, (x.shape[1],))
    return [x]


@defop("ada_layer_norm", "norm", 3, params=PARAMS["ada_layer_norm"],
       backward=("ada_layer_norm_grad",))
def _ada_layer_norm(ts, p):
    x, scale, shift = ts
    _float_x(x, "ada_layer_norm")
    _require(p["kind"] in ("layer", "rms"), f"ada_layer_norm kind {p['kind']!r}")
    for name, t in (("scale", scale), ("shift", shift)):
        _require(t.dtype == x.dtype, f"{name} dtype {t.dtype} differs from x {x.dtype}")
        _require(broadcast_shapes(x.shape, t.shape) == tuple(x.shape),
                 f"ada_layer_norm: {name} {t} does not broadcast to {x}")
    return [x]


@defop("gated_residual", "norm", 3, params=PARAMS["gated_residual"],
       backward=("gated_residual_grad",))
def _gated_residual(ts, p):
    x, y, gate = ts
    _require(x == y, f"gated_residual: x {x} and y {y} differ")
    _require(x.dtype.is_float and gate.dtype == x.dtype, f"gated_residual: gate {gate} vs {x}")
    _require(broadcast_shapes(y.shape, gate.shape) == tuple(y.shape),
             f"gated_residual: gate {gate} does not broadcast to {y}")
    return [x]


def group_layout(shape, c, groups):
    """Grouped shape of x and the axes that hold one group's elements.

    NCHW-like (c == 1): [N, G, C/G·H·W], one last-axis reduction. Otherwise
    [N, P, G, C/G, Q] with P, Q the products of the dims before and after the channel
    axis (Q dropped when the channels are last, as in flax's layout)."""
    n, ch = shape[0], shape[c]
    p = int(np.prod(shape[1:c], dtype=np.int64))
    q = int(np.prod(shape[c + 1:], dtype=np.int64))
    if c == 1:
        return (n, groups, (ch // groups) * q), [2]
    if c == len(shape) - 1:
        return (n, p, groups, ch // groups), [1, 3]
    return (n, p, groups, ch // groups, q), [1, 3, 4]
