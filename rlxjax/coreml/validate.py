"""Structural validation through coremltools' own milproto loader.

The loader rebuilds the program op by op with coremltools' op definitions: it re-runs type
inference and checks const-ness, opset membership and input types. On top of that we check
that every declared function output has the type the model description promises.
"""
from __future__ import annotations

from coremltools.proto import FeatureTypes_pb2

from ..errors import ValidationError
from .ct_private import PYMIL_DTYPES, failing_milproto_op, load_milproto

_ARRAY_DTYPES = {
    FeatureTypes_pb2.ArrayFeatureType.FLOAT32: PYMIL_DTYPES["fp32"],
    FeatureTypes_pb2.ArrayFeatureType.FLOAT16: PYMIL_DTYPES["fp16"],
    FeatureTypes_pb2.ArrayFeatureType.INT32: PYMIL_DTYPES["int32"],
    FeatureTypes_pb2.ArrayFeatureType.INT8: PYMIL_DTYPES["int8"],  # iOS26
}


def validate_model(model, weights_dir: str):
    """Load ``model`` through coremltools; return the pymil Program, or raise ValidationError."""
    try:
        prog = load_milproto(model, weights_dir)
    except Exception as e:  # any loader failure is a defect in the program we emitted
        raise ValidationError(f"coremltools' MIL loader rejected the program"
                              f"{failing_milproto_op(e)}: {type(e).__name__}: {e}") from e
    fn = prog.functions["main"]
    outputs = {v.name: v for v in fn.outputs}
    for feat in model.description.output:
        var = outputs.get(feat.name)
        if var is None:
            raise ValidationError(f"declared output {feat.name} is not a program output")
        arr = feat.type.multiArrayType
        if not all(isinstance(d, int) for d in var.shape):  # flexible (docs/flexible.md)
            shape, want = _flexible_shapes(var.shape, arr)
        else:
            shape, want = tuple(int(d) for d in var.shape), tuple(arr.shape)
        if shape != want or var.dtype != _ARRAY_DTYPES.get(arr.dataType):
            raise ValidationError(
                f"output {feat.name}: program gives {var.dtype.__name__}{list(shape)}, "
                f"description declares {list(arr.shape)} type {arr.dataType}")
    inputs = {name: v for name, v in fn.inputs.items()}
    for feat in model.description.input:
        if feat.name not in inputs:
            raise ValidationError(f"declared input {feat.name} is not a function input")
    return prog


def _flexible_shapes(shape, arr):
    """(program's, declared) shape of an output with symbolic dims in the loader's
    inference: a flexible output declares no shape (rank only, by the program); a static
    one, each dim the loader could not prove is taken as declared."""
    if not arr.shape:
        return tuple(shape), tuple(shape)
    got = tuple(int(d) if isinstance(d, int) else w for d, w in zip(shape, arr.shape))
    return got + tuple(shape[len(arr.shape):]), tuple(arr.shape)
