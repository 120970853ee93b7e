"""Core ML state ops (iOS18): ``read_state`` and ``write_state``.

The interpreter binds a state input to its buffer (a writable fp16 array owned by a
``ReferenceState``), so these see the buffer itself. Semantics follow coremltools'
definitions (``ops/defs/iOS18/states.py``, ``coreml_dialect/ops.py``): ``read_state`` copies
the state's content into a new value; ``write_state`` (what ``coreml_update_state`` is
serialised to, ``backend/mil/load.py``) replaces the content with ``data``, whose type must
be the state's wrapped type, and has no outputs. coremltools has no value inference for
either op (they carry no values at conversion time), so these are checked by running
programs coremltools itself emits (tests/training/test_train_mlstate.py).
"""
from __future__ import annotations

import numpy as np

from .registry import register


@register("read_state")
def read_state(inputs):
    return (np.array(inputs["input"], copy=True),)


@register("write_state")
def write_state(inputs):
    buf, data = inputs["input"], inputs["data"]
    if not isinstance(buf, np.ndarray) or not buf.flags.writeable:
        raise TypeError("write_state needs a state input (a state buffer)")
    data = np.asarray(data)
    if data.dtype != buf.dtype or data.shape != buf.shape:
        raise TypeError(f"write_state: data is {data.dtype}{list(data.shape)}, the state "
                        f"wraps {buf.dtype}{list(buf.shape)}")
    buf[...] = data
    return ()
