"""``coreml_train_step(..., precision="mixed")``: fp16 forward and backward, fp32 master
weights and optimizer state, dynamic loss scaling.

The program is an ordinary training step (program.py) with three differences, all expressed
in the graph's own dtypes (the program is lowered with ``precision="fp32"``, so every value
keeps the dtype the graph gives it; only what is traced in fp16 runs in fp16):

* **forward / backward in fp16.** The loss is traced as ``loss(cast16(params),
  *cast16(batch))``: every float32 parameter and batch leaf is converted to float16 on entry,
  so the whole forward pass (and, through rlxjax's backward of it, the whole backward pass)
  computes in fp16. The gradient of each fp32 parameter is the fp16 cotangent converted to
  fp32 (the vjp of the entry ``convert``). The loss is converted to fp32 on exit, aux leaves
  computed in fp16 too (so a loss's aux is returned as fp32, as JAX's policy libraries'
  ``output_dtype`` does).
* **dynamic loss scaling.** The backward pass starts from ``loss32 · S`` (``S`` the loss
  scale, fp32), so the fp16 cotangents are S times larger and small gradients do not flush
  to zero. The fp32 gradients are divided by ``S``; if any is inf or nan the step is
  skipped: parameters and optimizer state are selected unchanged, and ``S`` is divided by
  ``factor`` (not below ``min_scale``). After ``period`` consecutive finite steps ``S`` is
  multiplied by ``factor`` (unless that overflows fp32). This is the rule of jmp's
  ``DynamicLossScale`` (and Keras' ``LossScaleOptimizer``): counter ← (counter + 1) mod
  period on a finite step, 0 otherwise. The fp16 cotangent of the loss is ``S`` itself, so a
  scale of 2^16 or more (beyond fp16's 65504) makes every gradient inf and is halved on the
  next step: the scale settles at most at 2^15.
* **state.** The optimizer state the step carries is ``MixedState(optimizer=<optax state>,
  loss_scale=f32[], good_steps=i32[])``: the scale and its counter travel with the optimizer
  state (program inputs/outputs with ``state="io"``, Core ML states with ``"mlstate"``,
  where fp32 is kept exactly, states/mlstate.py), all in fp32 / int32.

Norms recognised in the fp16 forward lower with fp16-safe statistics (the ``x.dtype ==
fp16`` path of coreml/rules/norm.py: statistics computed on ``(x − mean) / max|x − mean|``,
no square can overflow; docs/numerics.md), in fp16: no reduction is promoted to fp32.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ArgumentError
from .export import numpy_tree
from .step import TrainStep


@dataclass(frozen=True)
class DynamicLossScale:
    """The loss-scaling schedule of a mixed-precision step (jmp's defaults)."""

    initial: float = 2.0 ** 15
    period: int = 2000
    factor: float = 2.0
    min_scale: float = 1.0

    def __post_init__(self):
        if not (np.isfinite(self.initial) and self.initial > 0):
            raise ArgumentError(f"loss_scale initial={self.initial}: a positive finite scale")
        if int(self.period) != self.period or self.period < 1:
            raise ArgumentError(f"loss_scale period={self.period}: a positive integer "
                                "number of finite steps before the scale grows")
        if not self.factor > 1:
            raise ArgumentError(f"loss_scale factor={self.factor}: must be > 1")
        if not (self.min_scale > 0 and self.min_scale <= self.initial):
            raise ArgumentError(f"loss_scale min_scale={self.min_scale}: must be in "
                                f"(0, initial={self.initial}]")


class MixedState(NamedTuple):
    """The optimizer state of a mixed-precision step."""

    optimizer: Any
    loss_scale: Any  # f32[]
    good_steps: Any  # i32[]: consecutive finite steps since the scale last changed


def _is_f32(x) -> bool:
    return hasattr(x, "dtype") and x.dtype == jnp.float32


def to_compute(tree):
    """Every float32 leaf as float16 (others unchanged)."""
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float16) if _is_f32(x) else x, tree)


def to_output(tree):
    """Every float16 leaf as float32 (others unchanged)."""
    return jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float32) if getattr(x, "dtype", None) == jnp.float16 else x,
        tree)


def all_finite(tree):
    """Whether every float leaf is finite, as ``isfinite`` of the sum of all their
    elements: inf and nan propagate through sums (inf + -inf is nan), and a sum of finite
    fp32 gradients overflows only beyond 3.4e38 (then the step is skipped too). One
    ``reduce_sum`` per leaf instead of an elementwise test, a reduction and two casts."""
    sums = [jnp.sum(x) for x in jax.tree_util.tree_leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.isfinite(sum(sums[1:], sums[0])) if sums else jnp.asarray(True)


def adjust_scale(cfg: DynamicLossScale, scale, good_steps, finite):
    """The next (scale, good_steps) after a step whose gradients were ``finite``."""
    grown = scale * jnp.float32(cfg.factor)
    grown = jax.lax.select(jnp.isfinite(grown), grown, scale)
    full = good_steps == jnp.int32(cfg.period - 1)
    on_finite = jax.lax.select(full, grown, scale)
    on_overflow = jnp.maximum(jnp.float32(cfg.min_scale), scale / jnp.float32(cfg.factor))
    # (counter + 1) mod period on a finite step, written as a select: the counter is never
    # negative, and jnp's floored % costs five MIL ops
    count = jax.lax.select(full, jnp.int32(0), good_steps + 1)
    return (jax.lax.select(finite, on_finite, on_overflow),
            jax.lax.select(finite, count, jnp.int32(0)))


def loss_scaled_optimizer(inner, cfg: DynamicLossScale):
    """An optax GradientTransformation over ``MixedState``: it receives the scaled fp32
    gradients, unscales them, applies ``inner`` when all are finite (zero updates and the
    old inner state otherwise) and adjusts the scale. (The step's update is ``params +
    updates``: a skipped step adds exact zeros.)"""
    import optax

    def init(params):
        return MixedState(inner.init(params), jnp.asarray(cfg.initial, jnp.float32),
                          jnp.zeros([], jnp.int32))

    def update(grads, state, params=None):
        grads = jax.tree_util.tree_map(lambda g: g / state.loss_scale, grads)
        finite = all_finite(grads)
        updates, new_inner = inner.update(grads, state.optimizer, params)
        # lax.select with the scalar predicate: one MIL select per leaf, no broadcast of
        # the predicate to each leaf's shape. (Not a lax.cond around the update: control
        # flow keeps a program off the Neural Engine, and the cost model showed the cond's
        # operand and pass-through bytes about equal to the selects'.)
        keep = lambda new, old: jax.lax.select(finite, new, old)  # noqa: E731
        updates = jax.tree_util.tree_map(lambda u: keep(u, jnp.zeros_like(u)), updates)
        new_inner = jax.tree_util.tree_map(keep, new_inner, state.optimizer)
        scale, count = adjust_scale(cfg, state.loss_scale, state.good_steps, finite)
        return updates, MixedState(new_inner, scale, count)

    return optax.GradientTransformation(init, update)


class MixedTrainStep(TrainStep):
    """``coreml_train_step(..., precision="mixed")`` (see the module docstring)."""

    def __init__(self, loss, optimizer, *, state: str, has_aux: bool, loss_scale=None,
                 **jit_options):
        cfg = DynamicLossScale() if loss_scale is None else loss_scale
        if not isinstance(cfg, DynamicLossScale):
            raise ArgumentError("loss_scale= takes rlxjax.DynamicLossScale(initial=, period=, "
                                f"factor=, min_scale=), got {type(cfg).__name__}")
        jit_options["precision"] = "fp32"  # lowered in the graph's own dtypes
        super().__init__(loss, loss_scaled_optimizer(optimizer, cfg), state=state,
                         has_aux=has_aux, **jit_options)
        self.inner_optimizer = optimizer
        self.loss_scale = cfg
        # the Program's precision: the graph's own dtypes, its f16 values computed in fp16
        # (Core ML lowers it as "fp32"; Core AI lowers f16 values as its own fp16)
        self.precision = "mixed"

        def mixed_fn(params, opt_state, *batch):
            if not isinstance(opt_state, MixedState):
                raise ArgumentError("a mixed-precision step's optimizer state is an "
                                    "rlxjax.MixedState (optimizer state, loss scale, counter): "
                                    "start from this step's init(params), not another step's")
            out = loss(to_compute(params), *to_compute(batch))
            value = out[0] if has_aux else out
            value32 = value.astype(jnp.float32) if hasattr(value, "astype") else value
            user = (value32, to_output(out[1])) if has_aux else value32
            return value32 * opt_state.loss_scale, user

        mixed_fn.__name__ = self.fun.__name__
        self.fun = mixed_fn

    def _definition(self):
        """The backward pass starts from the scaled loss, the traced function's first
        output; the loss (and aux) the user sees are the rest."""

        def split_scaled(traced, full):
            g = traced.graph
            scaled = g.outputs[0][1]
            g.outputs = list(g.outputs[1:])
            return dataclasses.replace(traced, out_tree=traced.out_tree.children()[1]), scaled

        return dataclasses.replace(super()._definition(), prepare=split_scaled)

    def scale_of(self, state) -> float:
        """The current loss scale (and from it, whether steps are being skipped)."""
        return float(np.asarray(numpy_tree(state.opt_state).loss_scale))
