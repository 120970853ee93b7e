"""Frontend rules: randomness.

``jax.random`` cannot be compiled: its values are defined by JAX's threefry counter-based
generator, and Core ML programs cannot reproduce those streams bit for bit (no uint32
arithmetic, no bitwise ops). Dead randomness is removed and live randomness refused, with
the draw and the user's line named, before any rule runs (frontend/random/liveness.py); the
rules here refuse every primitive that ``jax.random`` emits as a backstop.
``rlxjax.nn.dropout`` (primitive ``rlx_dropout``) is the supported way to draw
random numbers on the device: it lowers to the RLX ``bernoulli`` op (MIL
``random_bernoulli``), see rlxjax/nn/dropout.py for its semantics.
"""
from __future__ import annotations

import jax

from ...errors import UnsupportedDTypeError
from ..random.liveness import OPTIONS
from ..registry import rule

#: the ways out, in every error about jax.random (random/liveness.py refuses live randomness
#: before any rule runs; the rules below are the backstop for other translations)
RANDOM_DETAIL = OPTIONS

#: primitives emitted by jax.random (typed keys from jax.random.key and raw uint32 keys
#: from jax.random.PRNGKey, JAX 0.10), all refused on purpose -> what emits them
RANDOM_PRIMITIVES = {
    "random_seed": "jax.random.key / PRNGKey",
    "random_wrap": "raw PRNGKey used by any jax.random function; jax.random.wrap_key_data",
    "random_unwrap": "jax.random.PRNGKey / key_data",
    "random_bits": "jax.random.normal, uniform, bernoulli, randint, ...",
    "random_split": "jax.random.split",
    "random_fold_in": "jax.random.fold_in",
    "random_clone": "jax.random.clone",
    "threefry2x32": "the threefry hash (jax.random with jax_threefry_partitionable, "
                    "jax.extend.random)",
}


@rule(*RANDOM_PRIMITIVES)
def _jax_random(ctx, eqn, *inputs):
    raise ctx.unsupported(RANDOM_DETAIL)


def _mask_cache(ctx) -> dict:
    """Masks drawn so far in this translation, keyed by (seed, rate, shape, dtype)."""
    cache = getattr(ctx, "_rlx_dropout_masks", None)
    if cache is None:
        cache = {}
        ctx._rlx_dropout_masks = cache
    return cache


@rule("rlx_dropout")
def _dropout(ctx, eqn, x):
    """``y = x * (mask * scale)``; one mask per (seed, rate, shape, dtype) and program, as
    in JAX where the mask is a function of exactly those: the rlx_dropout that JAX's
    transpose applies to the cotangent in ``jax.grad`` thus reuses the forward's mask."""
    from ...nn.dropout import dropout_scale

    rate, seed = float(eqn.params["rate"]), int(eqn.params["seed"])
    if not x.type.is_static:
        raise ctx.unsupported(f"dropout of a dynamically shaped value {x.type}")
    if x.type.size == 0:
        return x
    key = (seed, rate, tuple(x.shape), x.dtype)
    cache = _mask_cache(ctx)
    if key not in cache:
        # MIL's random_bernoulli wants rank >= 1: draw a scalar's mask as [1] and reshape.
        shape = tuple(x.shape) or (1,)
        mask = ctx.add("bernoulli", shape=shape, dtype=x.dtype, prob=1.0 - rate, seed=seed)
        if not x.shape:
            mask = ctx.add("reshape", mask, shape=())
        scale = ctx.constant(dropout_scale(rate, x.dtype.np))
        cache[key] = ctx.add("mul", mask, scale)
    return ctx.add("mul", x, cache[key])


def reject_prng_key(x, what: str) -> None:
    """Raise a clear error if ``x`` is a typed JAX PRNG key array (``jax.random.key``):
    such keys reach rlxjax as arguments or closed-over constants, before any rule runs."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        raise UnsupportedDTypeError(f"{what} is a JAX PRNG key ({dtype}); {RANDOM_DETAIL}")
