"""Keras 3 models (JAX backend) as the pure functions rlxjax compiles.

A Keras model keeps its weights in ``keras.Variable`` objects; JAX code (and rlxjax) needs
them as arguments. ``stateless(model)`` gives ``(fn, trainable, non_trainable)``: ``fn``
runs ``model.stateless_call`` on the two lists of values, split as Keras splits them - by
each variable's ``trainable`` flag - so a LoRA model (``backbone.enable_lora(rank)``,
which freezes every weight but the adapters) trains its adapters with
``trainable=(True, False)`` and its frozen base baked in (and compressed)::

    fn, tv, ntv = rlxjax.keras.stateless(model)
    def loss(params, x, y):
        return jnp.mean((fn(*params, x) - y) ** 2)
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), trainable=(True, False),
                                    compress="int8")
    st = step.init((tv, ntv))

``generate(causal_lm)`` is keras-hub's ``generate`` path (its JAX ``generate_function``,
with the sampler's seed state in ``state``) as a function of ``(inputs, state)`` returning
the token ids and padding mask; ``assign(model, tv, ntv)`` writes values back into the
variables (Keras' own ``generate`` then uses trained weights).

Keras is imported only when a function here is called (``import rlxjax`` does not import
it); ``KERAS_BACKEND=jax`` must be set before Keras is first imported.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ArgumentError


def _keras():
    try:
        import keras
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ArgumentError("rlxjax.keras needs Keras 3 (pip install keras)") from e
    if keras.config.backend() != "jax":
        raise ArgumentError(f"rlxjax.keras needs Keras' JAX backend (KERAS_BACKEND=jax before "
                            f"Keras is imported); this Keras runs on "
                            f"{keras.config.backend()!r}")
    return keras


def values(variables) -> List[np.ndarray]:
    """The current values of Keras variables, as numpy arrays (their own dtypes)."""
    return [np.asarray(v.value) for v in variables]


def stateless(model, *, training: bool = False,
              **call_kwargs) -> Tuple[Callable, List[np.ndarray], List[np.ndarray]]:
    """``(fn, trainable values, non-trainable values)`` of a built Keras model (or layer):
    ``fn(trainable, non_trainable, *args, **kwargs)`` is ``model(*args, training=training,
    **call_kwargs, **kwargs)`` computed by ``model.stateless_call`` from the values given,
    returning the outputs (updates of non-trainable variables - batch-norm statistics, seed
    states - are dropped: pass ``training=False`` or freeze them)."""
    _keras()
    if not model.built:
        raise ArgumentError(f"Keras model {model.name!r} is not built: call it once (or "
                            "model.build(shape)) so that its variables exist")
    n_t, n_nt = len(model.trainable_variables), len(model.non_trainable_variables)

    def fn(trainable, non_trainable, *args, **kwargs):
        trainable, non_trainable = list(trainable), list(non_trainable)
        if len(trainable) != n_t or len(non_trainable) != n_nt:
            raise ArgumentError(
                f"Keras model {model.name!r} has {n_t} trainable and {n_nt} non-trainable "
                f"variables; got {len(trainable)} and {len(non_trainable)} values")
        out, _ = model.stateless_call(trainable, non_trainable, *args, training=training,
                                      **call_kwargs, **kwargs)
        return out

    fn.__name__ = f"{model.name}_stateless_call"
    return fn, values(model.trainable_variables), values(model.non_trainable_variables)


def assign(model, trainable: Sequence[Any], non_trainable: Optional[Sequence[Any]] = None):
    """Write values (as ``stateless`` orders them) back into the model's variables."""
    _keras()
    pairs = list(zip(model.trainable_variables, trainable))
    if non_trainable is not None:
        pairs += list(zip(model.non_trainable_variables, non_trainable))
    for var, val in pairs:
        var.assign(np.asarray(val))


def generate(causal_lm, *, stop_token_ids=None) -> Tuple[Callable, tuple]:
    """``(fn, state)`` of a keras-hub ``CausalLM``'s generation: ``fn(inputs, state)``
    (``inputs`` the preprocessed ``{"token_ids", "padding_mask"}`` of shape
    ``[batch, max_length]``) runs its sampler's loop as ``causal_lm.generate`` does on
    JAX, from ``state = (sampler variables, trainable, non-trainable values)``, and
    returns ``{"token_ids", "padding_mask"}``. The sampler is the one ``compile(sampler=)``
    set; a seeded sampler's draws are JAX's with ``random="inputs"`` (an int32 or float32
    ``padding_mask`` too: the loop's bound, ``max_length`` steps, is then checked on each
    call, random/guards.py). The sampler's new seed state is not returned (Core ML has no
    uint32 outputs): pass a new seed state for new draws. ``stop_token_ids``: a tuple of ids, or None to generate up to
    ``max_length`` (keras-hub's ``"auto"`` needs its preprocessor)."""
    keras = _keras()
    if stop_token_ids is not None:
        stop_token_ids = tuple(int(t) for t in stop_token_ids)
    lm = causal_lm

    def fn(inputs, state):
        sampler_vals, trainable, non_trainable = state
        mapping = itertools.chain(zip(lm.sampler.variables, sampler_vals),
                                  zip(lm.trainable_variables, trainable),
                                  zip(lm.non_trainable_variables, non_trainable))
        with keras.StatelessScope(state_mapping=mapping):
            return lm.generate_step(inputs, stop_token_ids)

    fn.__name__ = f"{lm.name}_generate"
    if getattr(lm, "sampler", None) is None:
        raise ArgumentError(f"{lm.name!r} has no sampler: call causal_lm.compile(sampler=...) "
                            "(or causal_lm.compile()) first")
    state = (values(lm.sampler.variables), values(lm.trainable_variables),
             values(lm.non_trainable_variables))
    return fn, state
