"""JAX references for ``precision="mixed"`` steps, for tests and bench/mixed_precision.py:
the fp32 step JAX users run (``fp32_step``), and the mixed-precision algorithm of
rlxjax/training/mixed_precision.py written independently in plain JAX (``mixed_step``:
jnp.float16 forward/backward through JAX's own autodiff, the loss-scale rule of jmp's
DynamicLossScale), both jitted. Nothing here calls rlxjax."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from rlxjax.training.mixed_precision import DynamicLossScale, MixedState  # (plain containers)


def to_f16(tree):
    return jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float16) if x.dtype == jnp.float32 else x, tree)


def finite(tree):
    return jnp.stack([jnp.isfinite(x).all() for x in jax.tree_util.tree_leaves(tree)]).all()


def adjust(cfg, scale, counter, ok):
    """jmp's rule: on a finite step grow by ``factor`` when the counter reaches period - 1
    (unless that overflows), counter (counter + 1) mod period; else shrink by ``factor``,
    not below ``min_scale``, counter 0."""
    grow = jax.lax.select(counter == cfg.period - 1, scale * cfg.factor, scale)
    grow = jax.lax.select(jnp.isfinite(grow), grow, scale)
    shrink = jnp.maximum(jnp.float32(cfg.min_scale), scale / cfg.factor)
    new_counter = jax.lax.select(ok, (counter + 1) % cfg.period, jnp.int32(0))
    return jax.lax.select(ok, grow, shrink), new_counter


def fp32_step(loss, optimizer):
    """``(params, opt_state, *batch) -> (params, opt_state, loss)`` in fp32."""
    @jax.jit
    def step(params, opt_state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def mixed_init(optimizer, params, cfg: DynamicLossScale = DynamicLossScale()) -> MixedState:
    return MixedState(optimizer.init(params), jnp.float32(cfg.initial), jnp.int32(0))


def mixed_step(loss, optimizer, cfg: DynamicLossScale = DynamicLossScale()):
    """``(params, MixedState, *batch) -> (params, MixedState, loss)``: fp16 compute through
    JAX's own autodiff, fp32 master weights, dynamic loss scaling, skip on inf/nan."""
    @jax.jit
    def step(params, state, *batch):
        def scaled(p32):
            value = loss(to_f16(p32), *to_f16(batch)).astype(jnp.float32)
            return value * state.loss_scale, value

        (_, value), grads = jax.value_and_grad(scaled, has_aux=True)(params)
        grads = jax.tree_util.tree_map(lambda g: g / state.loss_scale, grads)
        ok = finite(grads)
        updates, inner = optimizer.update(grads, state.optimizer, params)
        new_params = optax.apply_updates(params, updates)
        pick = lambda a, b: jnp.where(ok, a, b)  # noqa: E731
        new_params = jax.tree_util.tree_map(pick, new_params, params)
        inner = jax.tree_util.tree_map(pick, inner, state.optimizer)
        scale, count = adjust(cfg, state.loss_scale, state.good_steps, ok)
        return new_params, MixedState(inner, scale, count), value

    return step
