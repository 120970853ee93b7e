"""``rlxjax.nn.dropout``: dropout whose mask is drawn on the device under ``coreml_jit``.

JAX's own ``jax.random`` cannot be compiled (Core ML cannot reproduce threefry streams; see
``rlxjax/frontend/rules/random.py``). This primitive says *what* it wants — a Bernoulli
keep-mask for ``x`` — and leaves *how* to each backend:

* plain JAX (eager, ``jax.jit``, grad, vmap): the mask is ``jax.random.bernoulli`` of
  ``jax.random.key(seed)``, a fixed function of ``(seed, rate, x.shape)``. It is NOT the
  stream of any key the user holds, and it is the same on every call: a pure JAX function
  cannot draw fresh randomness.
* ``coreml_jit``: one MIL ``random_bernoulli`` op draws the mask on the device, from Core
  ML's own generator — its values never match JAX's. ``seed >= 0`` asks Core ML for a
  reproducible stream (MIL's ``seed`` input); ``seed=-1`` asks for fresh randomness on each
  call, which is what a training step usually wants. The reference backend draws the mask
  with numpy (``Generator(seed)``, or fresh entropy for -1), again not Core ML's stream.

Within one program every dropout with the same ``(seed, rate, shape, dtype)`` shares one
mask, as in JAX where the mask is a function of exactly those: the backward pass of
``coreml_jit(jax.grad(loss))`` (a second ``rlx_dropout`` applied to the cotangent) thus
reuses the forward's mask. Give different layers different seeds.

Semantics: ``y = x * (mask * scale)`` with ``mask`` in {0, 1} (1 with probability
``1 - rate``) and ``scale = 1 / (1 - rate)`` rounded once to ``x``'s dtype, so kept values
are ``x * scale`` exactly and dropped ones are 0. The map is linear in ``x`` for a fixed
mask, so the JVP is the primitive applied to the tangent and the transpose is the
primitive applied to the cotangent (same mask: ``dx = ct * mask * scale``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._jax_compat import ad
from ._primitive import define_primitive

__all__ = ["dropout", "dropout_p", "dropout_scale"]


def dropout_scale(rate: float, dtype) -> np.ndarray:
    """``1 / (1 - rate)`` in ``dtype``: the factor every kept value is multiplied by."""
    return np.asarray(1.0 / (1.0 - rate), dtype=dtype)


def _dropout_ref(x, *, rate, seed):
    keep = jax.random.bernoulli(jax.random.key(seed), 1.0 - rate, x.shape)
    return x * (keep.astype(x.dtype) * dropout_scale(rate, x.dtype))


dropout_p = define_primitive("rlx_dropout", _dropout_ref)
# Linear in x for a fixed mask: tangents and cotangents go through the same primitive (so
# jax.grad's jaxpr holds rlx_dropout, never the jax.random primitives of the reference).
ad.deflinear2(dropout_p, lambda ct, x, **params: [dropout_p.bind(ct, **params)])


def dropout(x, rate: float, *, deterministic: bool, seed: int = 0):
    """Inverted dropout: zero each element of ``x`` with probability ``rate`` and scale the
    rest by ``1 / (1 - rate)``; ``deterministic=True`` returns ``x`` itself (no op at all).

    ``rate`` and ``deterministic`` are static Python values. ``seed`` is a static int:
    ``>= 0`` for a reproducible mask, ``-1`` for a fresh mask on each call of a Core ML
    program (in plain JAX every seed gives one fixed mask; see the module docstring).
    """
    if not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError("dropout: deterministic must be a Python bool (static), got "
                        f"{type(deterministic).__name__}")
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1], got {rate}")
    seed = int(seed)
    if seed < -1 or seed >= 2 ** 31:
        raise ValueError(f"dropout: seed must be -1 (fresh on device) or in [0, 2**31), got {seed}")
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"dropout needs a float array, got {x.dtype}")
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return jnp.zeros_like(x)
    return dropout_p.bind(x, rate=rate, seed=seed)
