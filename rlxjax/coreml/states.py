"""Core ML states (iOS18 / CoreML8) in the programs rlxjax emits.

A state is a function input whose ``ValueType`` is a ``stateType`` wrapping an fp16 tensor.
The program reads it with ``read_state(input=state)`` (a copy) and writes it with
``write_state(input=state, data=value)`` (no outputs) - the two protobuf ops coremltools'
``coreml_update_state`` dialect op is serialised into (``backend/mil/load.py``). The model
description lists each state under ``description.state`` as a ``stateType`` feature with an
fp16 ``arrayType``; the app gets the buffers from ``MLModel.makeState()``.

Lowering puts every read at the top of the program and every write at its end, so each
read sees the value the previous call left, whatever order the runtime schedules the
arithmetic in between. The memory order (mil_order.py) keeps them there, except for a state
whose write computes from its read: no runtime can run that write before the read, so the
read moves to where its value is first needed and the write to where its value exists (a
train step's chunk states, states/mlstate.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

from ..errors import ArgumentError
from ..ir import DType, TensorType
from .builder import Var, value_type
from .ct_private import scalar_value
from .targets import Target, require


@dataclass(frozen=True)
class StateSpec:
    """One Core ML state of a program."""

    name: str                # graph input name ('state.f32.exp')
    mil_name: str            # state name in the program and the model description
    shape: Tuple[int, ...]
    dtype: str = "float16"   # Core ML states are fp16 only


def state_input(ctx, name: str, mil_name: str, t: TensorType):
    """Declare graph input ``name`` as a state. Returns (function input, spec, state var,
    the var ``read_state`` gives)."""
    target: Target = ctx.target
    require(target, "iOS18", "Core ML states")
    if t.dtype != DType.f16 or t.rank == 0:
        raise ArgumentError(f"state '{name}' is {t}: Core ML states are fp16 tensors of rank "
                            ">= 1")
    var = Var(mil_name, t, None)
    vt = MIL_pb2.ValueType()
    vt.stateType.wrappedType.CopyFrom(value_type(t))
    nvt = MIL_pb2.NamedValueType(name=mil_name, type=vt)
    read = ctx.b.op("read_state", t, input=var)
    return nvt, StateSpec(name, mil_name, tuple(t.shape)), var, read


def write_state(b, state: Var, value: Var) -> None:
    """Append ``write_state(input=state, data=value)`` (an op without outputs)."""
    if value.type != state.type:
        raise ArgumentError(f"writing {value.type} into state '{state.name}' of type "
                            f"{state.type}")
    name = b.fresh(f"{state.name}_write_state")
    b.op("write_state", [], input=state, data=value)
    b.ops[-1].attrs["name"] = scalar_value(name)  # no output to take the name from


def state_feature(spec: StateSpec) -> Model_pb2.FeatureDescription:
    arr = FeatureTypes_pb2.ArrayFeatureType(shape=list(spec.shape),
                                            dataType=FeatureTypes_pb2.ArrayFeatureType.FLOAT16)
    ft = FeatureTypes_pb2.FeatureType()
    ft.stateType.arrayType.CopyFrom(arr)
    return Model_pb2.FeatureDescription(name=spec.mil_name, shortDescription=spec.name, type=ft)


def describe_states(model, specs) -> None:
    """List ``specs`` in the model description (``description.state``)."""
    model.description.state.extend(state_feature(s) for s in specs)


def state_rows(model) -> list:
    """The metadata's row of each state the model description lists (``StateSpec``'s
    fields: graph input name, state name, shape, dtype)."""
    return [{"name": f.shortDescription, "mil_name": f.name,
             "shape": list(f.type.stateType.arrayType.shape), "dtype": "float16"}
            for f in model.description.state]
