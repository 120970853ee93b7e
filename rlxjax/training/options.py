"""``coreml_train_step``: check its options and make the training step they ask for.

The step classes are ``TrainStep`` (step.py), ``MaskedTrainStep`` for ``trainable=`` /
``compress=`` (trainable.py) and ``MixedTrainStep`` for ``precision="mixed"`` (mixed_precision.py);
this module picks one, so none of them needs to know the others.
"""
from __future__ import annotations

from typing import Callable

from .. import formats
from ..errors import ArgumentError
from .frozen import check_split_options
from .microbatch import check_microbatches
from .mixed_precision import MixedTrainStep
from .step import TrainStep
from .trainable import MaskedTrainStep


def coreml_train_step(loss: Callable, optimizer, *, state: str = "io", target=None,
                      precision: str = "fp32", has_aux: bool = False, backend=None,
                      random=None, trainable=None, compress=None, flexible=None,
                      loss_scale=None, microbatches: int = 1,
                      format: str = formats.DEFAULT):
    """One Core ML program = forward + backward + ``optimizer`` update (optax).

    ``loss(params, *batch)`` returns a scalar (or ``(loss, aux)`` with ``has_aux``). Use:
    ``st = step.init(params); st, loss = step(st, *batch)``, ``step.fit(...)``,
    ``step.save("train.mlpackage")``. ``state="io"`` passes params and optimizer state in
    and out of every call (default target iOS17); ``state="mlstate"`` keeps them in Core ML
    states updated in place (target iOS18, the default for it; exact fp32 storage, see
    rlxjax/states/mlstate.py). ``random="inputs"``: the loss's live ``jax.random`` draws
    (dropout) are computed on the host from the keys in the batch and fed as program
    inputs (see ``coreml_jit``); keys and RNG counters belong in the batch.
    ``random="device"``: the draws are Core ML random ops, fresh on every step.

    ``trainable``: which leaves of ``params`` are trained - a pytree of bools shaped like
    ``params`` or a prefix of it, or a callable ``(path, leaf) -> bool``; the others are
    frozen into the program as weights, stored compressed with ``compress`` (``"fp16"``,
    ``"int8"``, ``"int4"``, ``"palettize4"``, ``"palettize8"``). See
    rlxjax/training/trainable.py and rlxjax/compression/schemes.py.
    ``flexible``: batch axes whose size may change between steps of one program, by the
    loss's argument names, e.g. ``{"x": {0: (1, 256)}, "y": {0: (1, 256)}}`` (same bounds:
    one size; see ``coreml_jit`` and docs/flexible.md). Parameters and optimizer state
    stay static.
    ``precision="mixed"``: forward and backward in fp16, parameters and optimizer state in
    fp32, dynamic loss scaling (``loss_scale=rlxjax.DynamicLossScale(...)``; training/mixed.py).
    ``microbatches=k``: the batch is split along its leading axis into ``k`` slices whose
    forward and backward passes run one after another in one loop inside the program,
    their gradients averaged into one optimizer update (training/microbatch.py): the
    whole-batch step for a loss that is a mean over examples, with about ``1/k`` of its
    activations live.
    ``format="aimodel"``: the step as a Core AI program run on Apple's runtime
    (docs/coreai.md; ``state="mlstate"`` keeps fp32 / int32 leaves in Core AI states as they
    are; ``flexible=`` takes listed sizes, one static function each; ``precision="mixed"``
    computes the forward / backward in Core AI fp16).
    """
    check_microbatches(microbatches)
    if microbatches > 1:
        asked = [name for name, on in (("has_aux=True", has_aux), ("random=", random),
                                       ("trainable= / compress=", trainable is not None
                                        or compress is not None),
                                       ("flexible=", bool(flexible)),
                                       (f"precision={precision!r}", precision != "fp32"))
                 if on]
        if asked:
            raise ArgumentError(f"microbatches={microbatches} does not combine with "
                                f"{', '.join(asked)} (yet)")
    _check_format_supports(format, precision, flexible)
    if format != formats.DEFAULT:
        target = formats.resolve_target(target, format)
    elif state == "mlstate":
        target = formats.resolve_target("iOS18" if target is None else target)
        target.require("iOS18", "state='mlstate' (Core ML states)")
    target = formats.resolve_target("iOS17" if target is None else target)  # once
    if precision == "mixed":
        if trainable is not None or compress is not None or flexible:
            raise ArgumentError("precision='mixed' does not combine with trainable= / "
                                "compress= / flexible= (yet): use precision='fp32' for those")
        return MixedTrainStep(loss, optimizer, state=state, has_aux=has_aux,
                              loss_scale=loss_scale, target=target,
                              backend=backend, random=random, format=format)
    if loss_scale is not None:
        raise ArgumentError("loss_scale= is for precision='mixed' (fp16 compute) only")
    if precision != "fp32":
        raise ArgumentError("training steps compute in fp32 (precision='fp32') or mixed "
                            "(precision='mixed': fp16 forward/backward, fp32 weights and "
                            "optimizer state, loss scaling): pure fp16 gradients and "
                            "optimizer moments lose the updates")
    if flexible and {"params", "opt_state", 0, 1} & set(flexible):
        raise ArgumentError("flexible= names batch arguments only: parameters and optimizer "
                            "state keep their shapes (a Core ML state cannot be flexible)")
    options = dict(state=state, has_aux=has_aux, target=target,
                   precision=precision, backend=backend, random=random, flexible=flexible,
                   format=format)
    if trainable is None and compress is None:
        return TrainStep(loss, optimizer, microbatches=microbatches, **options)
    check_split_options(trainable, compress, target, formats.get(format))
    return MaskedTrainStep(loss, optimizer, trainable=trainable, compress=compress, **options)


def _check_format_supports(format, precision, flexible):
    """What the format's registry entry says it does not compile, refused by name."""
    entry = formats.REGISTRY[format]
    asked = [name for name, on in ((f"precision={precision!r}",
                                    precision not in entry.train_precisions),
                                   ("flexible=", bool(flexible) and not entry.flexible)) if on]
    if asked:
        raise ArgumentError(f"format={format!r} training steps: {', '.join(asked)} is not "
                            f"implemented for it (yet); it takes precision in "
                            f"{entry.train_precisions}"
                            f"{'' if entry.flexible else ', static shapes'}")
