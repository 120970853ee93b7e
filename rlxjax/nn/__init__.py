"""rlxjax.nn: the norm family (and dropout) as JAX primitives.

Each function binds exactly one primitive (one equation in ``jax.make_jaxpr``) that the
rlxjax frontend lowers to hand-written Core ML ops, and is an ordinary JAX function too:
eager, ``jax.jit``, ``jax.grad``/``jvp``/``vjp`` and ``jax.vmap`` all work and agree with the
``jax.numpy`` references in :mod:`rlxjax.nn.reference`.
"""
from . import primitives, reference
from .norms import (
    ada_layer_norm, batch_norm, batch_norm_train, gated_residual, group_norm, layer_norm,
    layer_norm2d, rms_norm,
)
from .primitives import PRIMITIVES
from .dropout import dropout

__all__ = [
    "layer_norm", "rms_norm", "group_norm", "batch_norm", "batch_norm_train",
    "layer_norm2d", "ada_layer_norm", "gated_residual", "PRIMITIVES", "primitives",
    "reference", "dropout",
]
