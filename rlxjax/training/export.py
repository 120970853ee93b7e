"""``export_inference``: the trained parameters baked into an inference program."""
from __future__ import annotations

import inspect
from typing import Callable

import jax
import numpy as np

from ..api import coreml_jit


def numpy_tree(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def export_inference(fn: Callable, params, *example_inputs, path=None, target: str = "iOS17",
                     precision: str = "fp32", backend=None, compress=None):
    """Compile ``fn(params, *inputs)`` for inference with ``params`` baked in as weights
    (trained parameters become constants in the weight blob). Returns the ``Compiled``
    program; writes the ``.mlpackage`` too when ``path`` is given.

    ``compress`` (``"fp16"``, ``"int8"``, ``"int4"``, ``"palettize4"``, ``"palettize8"``)
    stores each compressible parameter compressed (rlxjax/compression/schemes.py); the program
    computes with the dequantised values, and ``compiled.compression`` reports bytes and
    errors per parameter."""
    if compress is not None:
        from .compressed_export import export_compressed

        return export_compressed(fn, params, example_inputs, path=path, target=target,
                                 precision=precision, backend=backend, compress=compress)
    frozen = numpy_tree(params)

    def infer(*inputs):
        return fn(frozen, *inputs)

    try:  # name the program's inputs after fn's own named parameters (after ``params``)
        sig = inspect.signature(fn)
        rest = list(sig.parameters.values())[1:]
        if rest and rest[0].kind in (rest[0].POSITIONAL_ONLY, rest[0].POSITIONAL_OR_KEYWORD):
            infer.__signature__ = sig.replace(parameters=rest)
    except (TypeError, ValueError):  # no signature (a builtin): 'inputs.0', ...
        pass

    infer.__name__ = getattr(fn, "__name__", "inference")
    compiled = coreml_jit(infer, target=target, precision=precision,
                          backend=backend).lower(*example_inputs).compile()
    if path is not None:
        compiled.save(path)
    return compiled
