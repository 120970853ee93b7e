"""Gradient accumulation inside the program: ``coreml_train_step(..., microbatches=k)``.

The traced step function slices every batch leaf along its leading axis into ``k`` equal
micro-batches and runs ``jax.value_and_grad`` of the loss over them in one ``lax.scan``,
summing the losses and gradients in its carry; the program then divides both by ``k`` and
applies one optimizer update (program.py ``build_train_graph`` with ``grads_given``). Only
one micro-batch's activations are live at a time, so the peak of temporaries is about
``1/k`` of the whole batch's activations (plus one gradient accumulator).

For a loss that is the mean over the batch's examples (the usual case) the result is the
whole-batch step, up to the order of the sums. Across calls, ``optax.MultiSteps`` is the
other way to accumulate (one update every ``k`` calls, each call a micro-batch).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from ..errors import ArgumentError


def check_microbatches(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ArgumentError(f"microbatches must be a positive int, got {k!r}")
    return k


def micro_step_fn(loss: Callable, k: int) -> Callable:
    """``(params, opt_state, *batch) -> (mean loss, mean gradients)`` over ``k`` slices."""

    def step_fn(params, opt_state, *batch):
        leaves = jax.tree_util.tree_leaves(batch)
        for leaf in leaves:
            shape = jnp.shape(leaf)
            if not shape or shape[0] % k:
                raise ArgumentError(
                    f"microbatches={k}: every batch leaf needs a leading axis divisible by "
                    f"{k}, got one of shape {tuple(shape)}")
        slices = jax.tree_util.tree_map(
            lambda b: jnp.reshape(b, (k, b.shape[0] // k) + tuple(b.shape[1:])), batch)

        def body(carry, mb):
            total, grads = carry
            value, g = jax.value_and_grad(loss)(params, *mb)
            return (total + value, jax.tree_util.tree_map(jnp.add, grads, g)), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        (total, grads), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), slices)
        return total / k, jax.tree_util.tree_map(lambda g: g / k, grads)

    step_fn.__name__ = getattr(loss, "__name__", "train_step")
    return step_fn
