"""``coreml_train_step(..., trainable=, compress=)``: train a subset of the parameters on a
frozen (and possibly compressed) base.

``trainable`` says which leaves of ``params`` are trained: a pytree of bools with the
structure of ``params`` or a prefix of it (as ``optax.masked`` takes: ``{"base": False,
"head": True}`` covers every leaf under each key), or a callable ``(path, leaf) -> bool``
(``path`` as ``jax.tree_util.tree_flatten_with_path`` gives it), or - when ``params`` is a
flax.nnx ``State`` (``graphdef, params = nnx.split(model)``) - an nnx filter
(``nnx.LoRAParam``, ``nnx.All(nnx.Param, nnx.PathContains("head"))``...), matched per
Variable as ``nnx.split(model, filter, ...)`` partitions (nnx_filter.py). A LoRA
fine-tune keeps its adapters in their own subtree and marks only that one trainable
(``rlxjax.lora`` adds them to linen / equinox trees; ``nnx.LoRA`` holds them as
``nnx.LoRAParam``).

The split (``FrozenSplit``):

* the **trainable tree** is ``params`` with every frozen leaf replaced by
  ``optax.MaskedNode()`` (an empty subtree, as ``optax.masked`` marks what it leaves out):
  it is what ``TrainState.params`` holds, what the optimizer is initialised with (its state
  covers the trainable leaves only) and what the program takes and returns (or keeps in
  its Core ML states);
* the **frozen leaves** are baked into the program as ``weight`` nodes (rlxjax/ir/weight.py):
  constants in the weight file - not inputs, not states, not optimizer state. The grad
  transform differentiates only with respect to the trainable inputs, so no gradient is
  computed for a frozen leaf (no weight-gradient matmul, no update), while activations'
  gradients still flow through it. With ``compress=`` each compressible frozen leaf
  (rlxjax/compression/schemes.py) is stored compressed, and the program computes with its
  dequantised values; ``step.params(state)`` returns the whole tree with the frozen leaves
  as the program sees them (``step.frozen_params()`` the dequantised base alone, for a JAX
  reference).

The frozen values are those of the latest ``step.init(params)``; a new ``init`` replaces
them (and drops the programs compiled for the old ones).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import jax
import numpy as np

from ..compression import CompressionReport
from ..errors import ArgumentError
from .export import numpy_tree
from .frozen import FrozenSplit, bake_weights, check_split_options
from .step import TrainStep


class MaskedTrainStep(TrainStep):
    """A training step of the leaves ``trainable`` selects; the rest is baked in (frozen,
    compressed with ``compress``)."""

    def __init__(self, loss: Callable, optimizer, *, trainable, compress: Optional[str],
                 **kwargs):
        super().__init__(loss, optimizer, **kwargs)
        self.trainable = trainable
        self.compress = compress
        self.split: Optional[FrozenSplit] = None

        def masked_step(frozen, params, opt_state, *batch):
            return loss(self.split.merge(params, frozen), *batch)

        masked_step.__name__ = self.__name__
        self.fun = masked_step

    def _names(self, n_args):
        return ["frozen"] + super()._names(n_args - 1)

    def _require_split(self) -> FrozenSplit:
        if self.split is None:
            raise ArgumentError("call step.init(params) first: trainable= splits the "
                                "parameters given to init")
        return self.split

    def _definition(self):
        """``step.lower(trainable_params, opt_state, *batch)``: the frozen leaves of the
        latest ``init`` are traced first, then baked in as weights."""
        split = self._require_split()

        def bake(traced, full):
            return bake_weights(traced, len(split.values), split.weights, full[1:]), None

        return dataclasses.replace(super()._definition(), lead=(list(split.values),),
                                   prepare=bake)

    def init(self, params, *example_batch):
        """The initial TrainState of the trainable leaves of ``params`` (the others are
        frozen into the program: see rlxjax/training/trainable.py)."""
        params = numpy_tree(params)
        self.split = FrozenSplit.of(params, self.trainable, self.compress, self.format)
        self._programs.clear()
        self._latest = None
        return super().init(self.split.trainable_tree(params), *example_batch)

    def params(self, state):
        """The whole parameter tree: the trained leaves of ``state`` and the frozen ones as
        the program computes with them (dequantised when compressed)."""
        return jax.tree_util.tree_map(jax.numpy.asarray,
                                      self._require_split().merge(state.params))

    def export_params(self, state, path, *, trained_only: bool = False) -> str:
        """Write the whole tree (``self.params(state)``, the base dequantised) to the
        safetensors file ``path``; with ``trained_only`` just the trained leaves (a LoRA
        fine-tune's adapters), which ``step.load_params(path, state)`` reads back."""
        if not trained_only:
            return super().export_params(state, path)
        from .params_io import save_params

        return save_params(path, state.params, {"step": str(state.step)})

    def load_params(self, path, like, *, reset_optimizer: bool = False, strict: bool = True):
        """``like`` with its trained leaves read from the safetensors file ``path``. The file
        may be the adapters alone (``export_params(..., trained_only=True)``) or the whole
        tree (``export_params``'s default): then each frozen tensor in it must equal the
        base this step computes with (``step.params``), else an ArgumentError says so -
        a file trained on another base is not silently combined with this one. ``strict``:
        the file may hold no tensor that is neither a trained nor a frozen leaf."""
        from safetensors.numpy import load_file

        from .params_io import leaf_names

        state = super().load_params(path, like, reset_optimizer=reset_optimizer,
                                    strict=False)
        stored = load_file(os.fspath(path))
        trained, _, _ = leaf_names(like.params)
        f_names, f_values, _ = leaf_names(self.frozen_params())
        for name, want in zip(f_names, f_values):
            if name in stored and not (stored[name].dtype == want.dtype and
                                       np.array_equal(stored[name], want)):
                raise ArgumentError(
                    f"tensor '{name}' in {path} is a frozen weight of this step and differs "
                    "from the base it computes with: the file was trained on another base "
                    "(init the step with that base, or load the trained leaves only)")
        extra = sorted(set(stored) - set(trained) - set(f_names))
        if extra and strict:
            raise ArgumentError(f"{path} holds tensor '{extra[0]}' that the parameters do not "
                                f"have (extra: {extra[:5]}); pass strict=False to ignore them")
        return state

    def frozen_params(self):
        """The whole tree with the trained leaves None and the frozen ones as the program
        computes with them: the dequantised base a JAX reference runs on."""
        split = self._require_split()
        f_it = iter(split.values)
        return jax.tree_util.tree_unflatten(
            split.treedef, [None if m else next(f_it) for m in split.mask])

    @property
    def compression(self) -> CompressionReport:
        """Per frozen leaf: scheme, bytes stored, error of the dequantised values."""
        return self._require_split().report


__all__ = ["MaskedTrainStep", "check_split_options"]
