"""Public norm functions: validate, cast every operand to ``x``'s dtype, bind one primitive."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import primitives as P
from ._shapes import ADA_KINDS, broadcasts_to, check_shape, norm_axis, norm_eps

__all__ = [
    "layer_norm", "rms_norm", "group_norm", "batch_norm", "batch_norm_train",
    "layer_norm2d", "ada_layer_norm", "gated_residual",
]


def _as_x(x, op, min_rank=0):
    if not isinstance(x, jax.Array):
        x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{op}: x must be a floating-point array, got dtype {x.dtype}")
    if x.ndim < min_rank:
        raise ValueError(f"{op}: x must have rank >= {min_rank}, got shape {x.shape}")
    return x


def _as_like(a, x, name, op):
    """``a`` as an array of ``x``'s dtype (no equation when it already is one)."""
    if a is None:
        return None
    if not isinstance(a, jax.Array):
        a = jnp.asarray(a)
    if not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
        raise ValueError(f"{op}: {name} must be numeric, got dtype {a.dtype}")
    return a if a.dtype == x.dtype else lax.convert_element_type(a, x.dtype)


def _affine_ops(x, gamma, beta, want, op):
    gamma = _as_like(gamma, x, "gamma", op)
    beta = _as_like(beta, x, "beta", op)
    check_shape("gamma", gamma, want, op)
    check_shape("beta", beta, want, op)
    ops = [x] + [a for a in (gamma, beta) if a is not None]
    return ops, dict(has_gamma=gamma is not None, has_beta=beta is not None)


def layer_norm(x, gamma=None, beta=None, *, axis=-1, eps=1e-5):
    """Layer norm over ``x.shape[axis:]`` (centred variance); gamma/beta of shape
    ``x.shape[axis:]``. One ``rlx_layer_norm`` equation."""
    x = _as_x(x, "layer_norm", 1)
    axis = norm_axis(axis, x.ndim)
    ops, flags = _affine_ops(x, gamma, beta, x.shape[axis:], "layer_norm")
    return P.layer_norm_p.bind(*ops, axis=axis, eps=norm_eps(eps), **flags)


def rms_norm(x, gamma=None, beta=None, *, axis=-1, eps=1e-6):
    """``x * rsqrt(mean(x**2 over x.shape[axis:]) + eps) * gamma + beta``."""
    x = _as_x(x, "rms_norm", 1)
    axis = norm_axis(axis, x.ndim)
    ops, flags = _affine_ops(x, gamma, beta, x.shape[axis:], "rms_norm")
    return P.rms_norm_p.bind(*ops, axis=axis, eps=norm_eps(eps), **flags)


def group_norm(x, gamma, beta, *, num_groups, eps=1e-5, channel_axis=1):
    """Group norm: batch axis 0, channels at ``channel_axis`` (1 = NCHW, -1 = channels-last),
    any spatial rank; statistics per (sample, group); gamma/beta of shape (C,)."""
    op = "group_norm"
    x = _as_x(x, op, 2)
    c_ax = norm_axis(channel_axis, x.ndim, "channel_axis", lo=1)
    c = x.shape[c_ax]
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) \
            or num_groups < 1:
        raise ValueError(f"{op}: num_groups must be a positive int, got {num_groups!r}")
    if c % num_groups:
        raise ValueError(f"{op}: num_groups={num_groups} does not divide the {c} channels "
                         f"(axis {c_ax} of shape {x.shape})")
    ops, flags = _affine_ops(x, gamma, beta, (c,), op)
    return P.group_norm_p.bind(*ops, num_groups=int(num_groups), eps=norm_eps(eps),
                               channel_axis=c_ax, **flags)


def _channel_stats(x, c, op, *named):
    """Required per-channel (C,) vectors, in x's dtype, checked."""
    stats = []
    for name, a in named:
        if a is None:
            raise ValueError(f"{op}: {name} is required")
        a = _as_like(a, x, name, op)
        check_shape(name, a, (c,), op)
        stats.append(a)
    return stats


def batch_norm(x, gamma, beta, mean, var, *, eps=1e-5, axis=-1):
    """Inference batch norm with frozen statistics:
    ``(x - mean) * rsqrt(var + eps) * gamma + beta``; all vectors (C,) along ``axis``."""
    op = "batch_norm"
    x = _as_x(x, op, 1)
    axis = norm_axis(axis, x.ndim)
    c = x.shape[axis]
    ops, flags = _affine_ops(x, gamma, beta, (c,), op)
    stats = _channel_stats(x, c, op, ("mean", mean), ("var", var))
    return P.batch_norm_p.bind(*ops, *stats, eps=norm_eps(eps), axis=axis, **flags)


def batch_norm_train(x, gamma, beta, *, eps=1e-5, axis=-1, momentum=0.99,
                     running_mean, running_var):
    """Training batch norm: batch statistics over every axis but ``axis`` (biased, centred
    variance). Returns ``(y, new_running_mean, new_running_var)`` with
    ``new = momentum * running + (1 - momentum) * batch_stat`` (flax.linen.BatchNorm)."""
    op = "batch_norm_train"
    x = _as_x(x, op, 1)
    axis = norm_axis(axis, x.ndim)
    c = x.shape[axis]
    ops, flags = _affine_ops(x, gamma, beta, (c,), op)
    stats = _channel_stats(x, c, op, ("running_mean", running_mean), ("running_var", running_var))
    m = norm_eps(momentum, "momentum")
    if m > 1:
        raise ValueError(f"{op}: momentum must be in [0, 1], got {momentum!r}")
    y, new_mean, new_var = P.batch_norm_train_p.bind(*ops, *stats, eps=norm_eps(eps),
                                                     axis=axis, momentum=m, **flags)
    return y, new_mean, new_var


def layer_norm2d(x, gamma, beta, *, eps=1e-6):
    """ConvNeXt LayerNorm2d: NCHW input (rank >= 3), per-position norm over channel axis 1;
    gamma/beta (C,) broadcast as ``[1, C, 1, ...]``."""
    op = "layer_norm2d"
    x = _as_x(x, op, 3)
    ops, flags = _affine_ops(x, gamma, beta, (x.shape[1],), op)
    return P.layer_norm2d_p.bind(*ops, eps=norm_eps(eps), **flags)


def ada_layer_norm(x, scale, shift, *, kind="layer", eps=1e-6):
    """DiT adaLN: ``norm(x) * (1 + scale) + shift`` with an affine-free norm over the last
    axis (``kind="layer"``: centred layer norm, ``"rms"``: RMS norm); scale and shift must
    broadcast to ``x.shape``."""
    op = "ada_layer_norm"
    if kind not in ADA_KINDS:
        raise ValueError(f"{op}: kind must be one of {ADA_KINDS}, got {kind!r}")
    x = _as_x(x, op, 1)
    scale = _as_like(scale, x, "scale", op)
    shift = _as_like(shift, x, "shift", op)
    for name, a in (("scale", scale), ("shift", shift)):
        if a is None:
            raise ValueError(f"{op}: {name} is required")
        if not broadcasts_to(a.shape, x.shape):
            raise ValueError(f"{op}: {name} of shape {a.shape} does not broadcast to "
                             f"x's shape {x.shape}")
    return P.ada_layer_norm_p.bind(x, scale, shift, kind=str(kind), eps=norm_eps(eps))


def gated_residual(x, y, gate):
    """``x + gate * y``; x and y of the same shape, gate broadcasting to it."""
    op = "gated_residual"
    x = _as_x(x, op)
    y = _as_like(y, x, "y", op)
    gate = _as_like(gate, x, "gate", op)
    if y is None or gate is None:
        raise ValueError(f"{op}: y and gate are required")
    if y.shape != x.shape:
        raise ValueError(f"{op}: x and y must have the same shape, got {x.shape} and {y.shape}")
    if not broadcasts_to(gate.shape, y.shape):
        raise ValueError(f"{op}: gate of shape {gate.shape} does not broadcast to {y.shape}")
    return P.gated_residual_p.bind(x, y, gate)
