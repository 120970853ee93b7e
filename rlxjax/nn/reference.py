"""Plain ``jax.numpy`` references of the norm family.

Each has the same signature as its primitive-backed counterpart in :mod:`rlxjax.nn`, and is
what the primitives compute: the primitives' eager impl, MLIR lowering, JVP and vmap
fallback are all derived from these functions. Everything is computed in ``x``'s dtype
(``eps`` is a weakly-typed python float); variances are centred: ``mean((x - mean)**2)``.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ._shapes import ADA_KINDS, channel_vec_shape, norm_axis

__all__ = [
    "layer_norm_ref", "rms_norm_ref", "group_norm_ref", "batch_norm_ref",
    "batch_norm_train_ref", "layer_norm2d_ref", "ada_layer_norm_ref", "gated_residual_ref",
]


def _affine(y, gamma, beta, shape=None):
    if gamma is not None:
        y = y * (gamma if shape is None else jnp.reshape(gamma, shape))
    if beta is not None:
        y = y + (beta if shape is None else jnp.reshape(beta, shape))
    return y


def _centred(x, axes, eps):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=axes, keepdims=True)
    return xc * lax.rsqrt(var + eps)


def _rms(x, axes, eps):
    ms = jnp.mean(x * x, axis=axes, keepdims=True)
    return x * lax.rsqrt(ms + eps)


def layer_norm_ref(x, gamma=None, beta=None, *, axis=-1, eps=1e-5):
    """Normalise over ``x.shape[axis:]``; gamma/beta have shape ``x.shape[axis:]``."""
    axis = norm_axis(axis, jnp.ndim(x))
    return _affine(_centred(x, tuple(range(axis, x.ndim)), eps), gamma, beta)


def rms_norm_ref(x, gamma=None, beta=None, *, axis=-1, eps=1e-6):
    """``x * rsqrt(mean(x**2 over x.shape[axis:]) + eps) * gamma + beta``."""
    axis = norm_axis(axis, jnp.ndim(x))
    return _affine(_rms(x, tuple(range(axis, x.ndim)), eps), gamma, beta)


def group_norm_ref(x, gamma, beta, *, num_groups, eps=1e-5, channel_axis=1):
    """Batch axis 0, channels at ``channel_axis``; statistics per (sample, group) over the
    group's channels and every spatial axis."""
    nd = jnp.ndim(x)
    c_ax = norm_axis(channel_axis, nd, "channel_axis", lo=1)
    c = x.shape[c_ax]
    g = int(num_groups)
    split = x.shape[:c_ax] + (g, c // g) + x.shape[c_ax + 1:]
    xg = jnp.reshape(x, split)
    axes = tuple(i for i in range(1, len(split)) if i != c_ax)
    y = jnp.reshape(_centred(xg, axes, eps), x.shape)
    return _affine(y, gamma, beta, channel_vec_shape(nd, c_ax, c))


def batch_norm_ref(x, gamma, beta, mean, var, *, eps=1e-5, axis=-1):
    """Frozen statistics: ``(x - mean) * rsqrt(var + eps) * gamma + beta`` per feature."""
    nd = jnp.ndim(x)
    axis = norm_axis(axis, nd)
    shape = channel_vec_shape(nd, axis, x.shape[axis])
    y = (x - jnp.reshape(mean, shape)) * lax.rsqrt(jnp.reshape(var, shape) + eps)
    return _affine(y, gamma, beta, shape)


def batch_norm_train_ref(x, gamma, beta, *, eps=1e-5, axis=-1, momentum=0.99,
                         running_mean, running_var):
    """Batch statistics over every axis but ``axis`` (biased, centred variance).
    Returns ``(y, new_running_mean, new_running_var)`` with
    ``new = momentum * running + (1 - momentum) * batch_stat`` (flax's convention)."""
    nd = jnp.ndim(x)
    axis = norm_axis(axis, nd)
    red = tuple(i for i in range(nd) if i != axis)
    mean = jnp.mean(x, axis=red, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=red, keepdims=True)
    shape = channel_vec_shape(nd, axis, x.shape[axis])
    y = _affine(xc * lax.rsqrt(var + eps), gamma, beta, shape)
    m = momentum
    new_mean = m * running_mean + (1 - m) * jnp.reshape(mean, running_mean.shape)
    new_var = m * running_var + (1 - m) * jnp.reshape(var, running_var.shape)
    return y, new_mean, new_var


def layer_norm2d_ref(x, gamma, beta, *, eps=1e-6):
    """ConvNeXt LayerNorm2d: NCHW (rank >= 3), per-position norm over channel axis 1."""
    nd = jnp.ndim(x)
    y = _centred(x, (1,), eps)
    return _affine(y, gamma, beta, channel_vec_shape(nd, 1, x.shape[1]))


def ada_layer_norm_ref(x, scale, shift, *, kind="layer", eps=1e-6):
    """DiT adaLN: ``norm(x) * (1 + scale) + shift``; norm over the last axis, no affine."""
    if kind not in ADA_KINDS:
        raise ValueError(f"ada_layer_norm: kind must be one of {ADA_KINDS}, got {kind!r}")
    n = _centred(x, (x.ndim - 1,), eps) if kind == "layer" else _rms(x, (x.ndim - 1,), eps)
    return n * (1 + scale) + shift


def gated_residual_ref(x, y, gate):
    """``x + gate * y``."""
    return x + gate * y
