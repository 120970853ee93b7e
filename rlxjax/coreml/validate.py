"""Structural validation through coremltools' own milproto loader.

The loader rebuilds the program op by op with coremltools' op definitions: it re-runs type
inference and checks const-ness, opset membership and input types. On top of that we check
that every declared function output has the type the model description promises.
"""
from __future__ import annotations

from coremltools.converters.mil.frontend.milproto.load import load as _load_milproto
from coremltools.converters.mil.mil import types as ct_types
from coremltools.proto import FeatureTypes_pb2

from ..errors import ValidationError

_ARRAY_DTYPES = {
    FeatureTypes_pb2.ArrayFeatureType.FLOAT32: ct_types.fp32,
    FeatureTypes_pb2.ArrayFeatureType.FLOAT16: ct_types.fp16,
    FeatureTypes_pb2.ArrayFeatureType.INT32: ct_types.int32,
}


def _failing_op(exc: BaseException) -> str:
    """' at op <type> -> <output>' when the loader's traceback shows which op it was
    loading (best effort: the loader's own messages do not say)."""
    tb, found = exc.__traceback__, ""
    while tb is not None:
        spec = tb.tb_frame.f_locals.get("op_spec")
        if spec is not None and hasattr(spec, "outputs"):
            outs = ", ".join(o.name for o in spec.outputs)
            found = f" at op {spec.type} -> {outs}"
        tb = tb.tb_next
    return found


def validate_model(model, weights_dir: str):
    """Load ``model`` through coremltools; return the pymil Program, or raise ValidationError."""
    try:
        prog = _load_milproto(model, model.specificationVersion, weights_dir)
    except Exception as e:  # any loader failure is a defect in the program we emitted
        raise ValidationError(f"coremltools' MIL loader rejected the program"
                              f"{_failing_op(e)}: {type(e).__name__}: {e}") from e
    fn = prog.functions["main"]
    outputs = {v.name: v for v in fn.outputs}
    for feat in model.description.output:
        var = outputs.get(feat.name)
        if var is None:
            raise ValidationError(f"declared output {feat.name} is not a program output")
        arr = feat.type.multiArrayType
        shape = tuple(int(d) for d in var.shape)
        if shape != tuple(arr.shape) or var.dtype != _ARRAY_DTYPES.get(arr.dataType):
            raise ValidationError(
                f"output {feat.name}: program gives {var.dtype.__name__}{list(shape)}, "
                f"description declares {list(arr.shape)} type {arr.dataType}")
    inputs = {name: v for name, v in fn.inputs.items()}
    for feat in model.description.input:
        if feat.name not in inputs:
            raise ValidationError(f"declared input {feat.name} is not a function input")
    return prog
