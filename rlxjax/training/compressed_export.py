"""``export_inference(..., compress=)``: an inference program whose parameters are stored
compressed (rlxjax/compression/schemes.py).

The function is traced with its parameters as inputs (so that each parameter keeps its
identity), then each parameter input becomes a ``weight`` node (rlxjax/ir/weight.py) that
the lowering stores with the scheme's constexpr op; nothing computed from a weight is
constant-folded into a plain fp32 copy.
"""
from __future__ import annotations

import inspect
from typing import Callable

import jax

from .. import formats
from ..api import CoreMLFunction, Stage
from ..compression import CompressionReport
from ..frontend import Traced, arg_names, path_name
from .frozen import bake_leaves, bake_weights


def _baked(fn, treedef, weights, **options) -> CoreMLFunction:
    """``fn(params, *inputs)`` traced with the parameter leaves as leading inputs, which its
    stage replaces by weight nodes."""

    def baked(leaves, *inputs):
        return fn(jax.tree_util.tree_unflatten(treedef, leaves), *inputs)

    def names(n_args):
        try:
            inspect.signature(fn)
            rest = arg_names(fn, n_args)[1:]
        except (TypeError, ValueError):
            rest = [f"inputs.{i}" for i in range(n_args - 1)]
        return ["params"] + rest

    def bake(traced: Traced, args) -> Traced:
        return bake_weights(traced, len(weights), weights, args[1:])

    baked.__name__ = getattr(fn, "__name__", "inference")
    return CoreMLFunction(baked, static_argnums=(), stage=Stage(bake, names=names), **options)


def export_compressed(fn: Callable, params, example_inputs, *, path, target, precision,
                      backend, compress):
    step_format = formats.get()
    step_format.check_compression(compress, target)
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    values, weights, rows = bake_leaves([(path_name("params", p), leaf) for p, leaf in flat],
                                        compress, step_format)
    step = _baked(fn, treedef, weights, target=target, precision=precision, backend=backend)
    compiled = step.lower(values, *example_inputs).compile()
    compiled.compression = CompressionReport(compress, tuple(rows))
    if path is not None:
        compiled.save(path)
    return compiled
