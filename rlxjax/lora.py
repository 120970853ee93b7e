"""LoRA adapters for plain parameter trees, on a frozen (compressed) base.

The trees: flax.linen ``variables["params"]``, the array half of an ``eqx.partition``,
nested dicts. Train low-rank adapters on a frozen base with
``coreml_train_step(..., trainable=rlxjax.lora.TRAINABLE, compress="int8")``.

    tree = rlxjax.lora.add_adapters(params, rank=8, key=jax.random.key(0),
                                    select=lambda path, leaf: path[-1].key == "kernel")
    # {"base": params, "lora": {"Dense_0.kernel": {"a": (d0, 8), "b": (8, d1)}, ...}}

    def loss(tree, x, y):
        p = rlxjax.lora.merge(tree)          # W + (alpha / rank) * a @ b per adapted kernel
        return jnp.mean((model.apply({"params": p}, x) - y) ** 2)   # the model is unchanged

    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), trainable=rlxjax.lora.TRAINABLE,
                                    compress="int8")

The adapters are their own subtree, so the base is frozen (baked in as weights, compressed
with ``compress=``) and only ``a`` and ``b`` are trained. As in the LoRA paper, ``b`` starts
at zero and ``a`` is random (normal, std ``1/sqrt(d0)``, from the caller's key), so the
merged parameters start equal to the base. ``merge`` is plain JAX: it runs inside the
traced loss and in JAX alike, and ``merge(step.params(state))`` gives the fine-tuned
parameters to export. Only 2-D leaves take adapters (``d0 x d1``: a linen kernel ``(in,
out)`` or an equinox weight ``(out, in)`` alike); pass ``select`` to choose them.

flax.nnx models need none of this: ``nnx.LoRA`` / ``nnx.LoRALinear`` hold their adapters as
``nnx.LoRAParam`` Variables, and ``trainable=nnx.LoRAParam`` (any nnx filter) selects them in
``graphdef, params = nnx.split(model)`` (rlxjax/training/nnx_filter.py).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ArgumentError
from .frontend import path_name

TRAINABLE = {"base": False, "lora": True}
"""The ``trainable=`` prefix of an ``add_adapters`` tree: adapters trained, base frozen."""


def _name(path) -> str:
    return path_name("", path)[1:]  # 'Dense_0.kernel'


def _default_select(path, leaf) -> bool:
    return np.ndim(leaf) == 2 and jnp.issubdtype(jnp.result_type(leaf), jnp.floating)


@partial(jax.jit, static_argnums=(1, 2))
def _draw(key, shapes, rank):
    """The ``a`` of each adapter, one jitted draw for all (not one XLA compile per shape)."""
    keys = jax.random.split(key, len(shapes))
    return [jax.random.normal(k, (d0, rank), dtype) / np.sqrt(d0).astype(dtype)
            for k, ((d0, _), dtype) in zip(keys, shapes)]


def add_adapters(params, *, rank: int, key, select: Optional[Callable] = None) -> dict:
    """``{"base": params, "lora": {name: {"a": (d0, rank), "b": (rank, d1)}}}`` with one
    adapter per 2-D leaf ``select(path, leaf)`` chooses (default: every 2-D float leaf;
    ``path`` as ``jax.tree_util.tree_flatten_with_path`` gives it). ``a`` is drawn from
    ``key`` (normal, std ``1/sqrt(d0)``), ``b`` is zero."""
    if not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ArgumentError(f"add_adapters(rank={rank!r}): the rank must be a positive int")
    select = _default_select if select is None else select
    chosen = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if not select(path, leaf):
            continue
        name = _name(path)
        if np.ndim(leaf) != 2 or not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
            raise ArgumentError(f"add_adapters: '{name}' is {jnp.result_type(leaf)} of shape "
                                f"{np.shape(leaf)}; adapters go on 2-D float kernels only: "
                                "make select return False for it")
        chosen.append((name, leaf))
    if not chosen:
        raise ArgumentError("add_adapters: select chose no 2-D parameter: nothing to adapt")
    names = [n for n, _ in chosen]
    if len(set(names)) != len(names):
        raise ArgumentError(f"add_adapters: two parameters have the same dotted name in {names}")
    shapes = tuple((np.shape(leaf), jnp.result_type(leaf)) for _, leaf in chosen)
    drawn = _draw(key, shapes, rank)
    lora = {name: {"a": a, "b": jnp.zeros((rank, np.shape(leaf)[1]), a.dtype)}
            for (name, leaf), a in zip(chosen, drawn)}
    return {"base": params, "lora": lora}


def merge(tree, *, alpha: Optional[float] = None):
    """The effective parameters of an ``add_adapters`` tree: ``base`` with ``W + (alpha /
    rank) * a @ b`` for each adapted leaf (``alpha`` defaults to the rank: scale 1). Plain
    JAX, for use inside the loss (and on ``step.params(state)`` after training)."""
    if not (isinstance(tree, dict) and set(tree) == {"base", "lora"}):
        raise ArgumentError("lora.merge takes the {'base': ..., 'lora': ...} tree "
                            "add_adapters returns")
    lora = tree["lora"]
    seen = set()

    def one(path, w):
        name = _name(path)
        if name not in lora:
            return w
        seen.add(name)
        a, b = lora[name]["a"], lora[name]["b"]
        delta = a @ b
        if alpha is not None and alpha != a.shape[-1]:
            delta = (alpha / a.shape[-1]) * delta
        return w + delta

    out = jax.tree_util.tree_map_with_path(one, tree["base"])
    missing = set(lora) - seen
    if missing:
        raise ArgumentError(f"lora.merge: adapters {sorted(missing)} name no base parameter")
    return out


__all__ = ["TRAINABLE", "add_adapters", "merge"]
