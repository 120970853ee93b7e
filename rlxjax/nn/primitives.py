"""The norm-family primitives (``rlx_*``) and their operand-form references.

Bind contract (read by the rlxjax frontend; keep in sync with ``rlxjax.nn.norms``):

======================  =====================================  ==============================
primitive               operands (in order)                    params
======================  =====================================  ==============================
rlx_layer_norm          x, gamma?, beta?                       axis, eps, has_gamma, has_beta
rlx_rms_norm            x, gamma?, beta?                       axis, eps, has_gamma, has_beta
rlx_group_norm          x, gamma?, beta?                       num_groups, eps, channel_axis,
                                                               has_gamma, has_beta
rlx_batch_norm          x, gamma?, beta?, mean, var            eps, axis, has_gamma, has_beta
rlx_batch_norm_train    x, gamma?, beta?, running_mean,        eps, axis, momentum,
  (3 results)           running_var                            has_gamma, has_beta
rlx_layer_norm2d        x, gamma?, beta?                       eps, has_gamma, has_beta
rlx_ada_layer_norm      x, scale, shift                        kind, eps
rlx_gated_residual      x, y, gate                             (none)
======================  =====================================  ==============================

Axes are normalised to ``0..ndim-1``; all operands have ``x``'s dtype (the wrappers cast).
"""
from __future__ import annotations

import jax.numpy as jnp

from .._jax_compat import ShapedArray
from . import reference as R
from ._primitive import (
    NOT_MAPPED, define_primitive, merge_into_axis0, shift_axes, x_only_policy,
)

__all__ = [
    "layer_norm_p", "rms_norm_p", "group_norm_p", "batch_norm_p", "batch_norm_train_p",
    "layer_norm2d_p", "ada_layer_norm_p", "gated_residual_p", "PRIMITIVES",
]


def _split_affine(ops, has_gamma, has_beta):
    """Split ``x, gamma?, beta?, *rest`` into ``(x, gamma|None, beta|None, rest)``."""
    x, rest = ops[0], list(ops[1:])
    gamma = rest.pop(0) if has_gamma else None
    beta = rest.pop(0) if has_beta else None
    return x, gamma, beta, rest


def _layer_norm(*ops, axis, eps, has_gamma, has_beta):
    x, g, b, _ = _split_affine(ops, has_gamma, has_beta)
    return R.layer_norm_ref(x, g, b, axis=axis, eps=eps)


def _rms_norm(*ops, axis, eps, has_gamma, has_beta):
    x, g, b, _ = _split_affine(ops, has_gamma, has_beta)
    return R.rms_norm_ref(x, g, b, axis=axis, eps=eps)


def _group_norm(*ops, num_groups, eps, channel_axis, has_gamma, has_beta):
    x, g, b, _ = _split_affine(ops, has_gamma, has_beta)
    return R.group_norm_ref(x, g, b, num_groups=num_groups, eps=eps, channel_axis=channel_axis)


def _batch_norm(*ops, eps, axis, has_gamma, has_beta):
    x, g, b, (mean, var) = _split_affine(ops, has_gamma, has_beta)
    return R.batch_norm_ref(x, g, b, mean, var, eps=eps, axis=axis)


def _batch_norm_train(*ops, eps, axis, momentum, has_gamma, has_beta):
    x, g, b, (rm, rv) = _split_affine(ops, has_gamma, has_beta)
    return R.batch_norm_train_ref(x, g, b, eps=eps, axis=axis, momentum=momentum,
                                  running_mean=rm, running_var=rv)


def _layer_norm2d(*ops, eps, has_gamma, has_beta):
    x, g, b, _ = _split_affine(ops, has_gamma, has_beta)
    return R.layer_norm2d_ref(x, g, b, eps=eps)


def _ada_layer_norm(x, scale, shift, *, kind, eps):
    return R.ada_layer_norm_ref(x, scale, shift, kind=kind, eps=eps)


def _gated_residual(x, y, gate):
    return R.gated_residual_ref(x, y, gate)


def _bn_train_abstract_eval(x, *rest, **params):
    rm, rv = rest[-2], rest[-1]
    return [ShapedArray(x.shape, x.dtype), ShapedArray(rm.shape, rm.dtype),
            ShapedArray(rv.shape, rv.dtype)]


def _gated_residual_policy(args, dims, params):
    """Always keeps the primitive: batch dims go to the front, an unbatched x or y is
    broadcast over the batch, and a batched gate ``[B, *g]`` gets unit dims
    (``[B, 1.., *g]``, rank(y) + 1) so it still aligns with y the numpy (trailing) way."""
    bsize = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    x, y, gate = (a if d is NOT_MAPPED else jnp.moveaxis(a, d, 0)
                  for a, d in zip(args, dims))
    if dims[0] is NOT_MAPPED:
        x = jnp.broadcast_to(x, (bsize,) + x.shape)
    if dims[1] is NOT_MAPPED:
        y = jnp.broadcast_to(y, (bsize,) + y.shape)
    if dims[2] is not NOT_MAPPED:
        core = gate.shape[1:]
        gate = gate.reshape((bsize,) + (1,) * (y.ndim - 1 - len(core)) + core)
    return (x, y, gate), params, lambda out: out


layer_norm_p = define_primitive("rlx_layer_norm", _layer_norm, batch_policy=shift_axes("axis"))
rms_norm_p = define_primitive("rlx_rms_norm", _rms_norm, batch_policy=shift_axes("axis"))
group_norm_p = define_primitive("rlx_group_norm", _group_norm, batch_policy=merge_into_axis0())
batch_norm_p = define_primitive("rlx_batch_norm", _batch_norm, batch_policy=shift_axes("axis"))
# batch statistics span every axis but ``axis``: a vmapped dim must not join them, so
# batch_norm_train always vmaps its reference.
batch_norm_train_p = define_primitive("rlx_batch_norm_train", _batch_norm_train,
                                      multiple_results=True,
                                      abstract_eval=_bn_train_abstract_eval)
layer_norm2d_p = define_primitive("rlx_layer_norm2d", _layer_norm2d,
                                  batch_policy=merge_into_axis0())
# norm over the last axis; scale/shift broadcast to x with numpy (trailing) alignment, so
# a new leading dim on x alone changes nothing.
ada_layer_norm_p = define_primitive("rlx_ada_layer_norm", _ada_layer_norm,
                                    batch_policy=x_only_policy(lambda x, p: (x, p, lambda o: o)))
gated_residual_p = define_primitive("rlx_gated_residual", _gated_residual,
                                    batch_policy=_gated_residual_policy)

PRIMITIVES = {p.name: p for p in (
    layer_norm_p, rms_norm_p, group_norm_p, batch_norm_p, batch_norm_train_p,
    layer_norm2d_p, ada_layer_norm_p, gated_residual_p)}
