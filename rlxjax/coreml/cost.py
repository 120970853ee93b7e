"""A static cost model of an ML Program: FLOPs and bytes per MIL op and in total.

Device time cannot be measured off a Mac, so ``Compiled.cost_analysis()`` and
``rlxjax inspect`` report what the program asks the hardware to do, read from the protobuf
alone (any package, not only rlxjax's):

- FLOPs: ``2·M·N·K`` for ``matmul`` / ``linear``, ``2·|out|·|w[1:]|`` for ``conv``
  (``2·|x|·|w[1:]|`` for ``conv_transpose``), ``|x|`` for reductions, ``|out|`` for other
  arithmetic, 0 for pure data movement (reshape, transpose, slices, gathers, casts, ...);
  transcendental functions count as one FLOP per element (a model, not a measurement).
- bytes read / written: the sizes of every tensor an op reads and writes (no caching).
- ops inside ``cond`` / ``while_loop`` blocks are counted once (``depth`` > 0): a loop's trip
  count is a runtime value.
- weight bytes: the size of every constant, and of the payloads of ``constexpr_*`` ops
  (compressed weights, decompressed at load: their attributes / value-bound inputs, sub-byte
  data packed).
- bytes by dtype: the bytes read and written split by the element type of each tensor
  (``{"FLOAT16": ..., "FLOAT32": ...}``): what a mixed-precision program moves in fp16
  (its forward and backward) and in fp32 (master weights, optimizer update, casts).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from .mil import bool_flag, function_block, walk

_DTYPE_BYTES = {"FLOAT32": 4, "FLOAT16": 2, "INT32": 4, "BOOL": 1, "INT8": 1, "UINT8": 1,
                "INT16": 2, "UINT16": 2, "FLOAT64": 8, "INT64": 8}

_MOVEMENT = {
    "reshape", "transpose", "squeeze", "expand_dims", "slice_by_index", "slice_by_size",
    "concat", "split", "stack", "tile", "pad", "gather", "gather_nd", "gather_along_axis",
    "scatter", "scatter_nd", "scatter_along_axis", "identity", "cast", "fill", "const",
    "cond", "while_loop", "read_state", "coreml_update_state", "shape", "reverse",
    "slice_update", "band_part", "one_hot",
}
_REDUCTIONS = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
               "reduce_l2_norm", "reduce_sum_square", "reduce_log_sum_exp", "reduce_argmax",
               "reduce_argmin", "cumsum"}

Shape = Tuple[int, ...]


def _tensor(vt) -> Optional[Tuple[Shape, str]]:
    if vt.WhichOneof("type") == "tensorType":
        t = vt.tensorType
        from coremltools.proto import MIL_pb2

        dims = tuple(int(d.constant.size) if d.WhichOneof("dimension") == "constant" else 1
                     for d in t.dimensions)
        return dims, MIL_pb2.DataType.Name(t.dataType)
    if vt.WhichOneof("type") == "stateType":
        return _tensor(vt.stateType.wrappedType)
    return None


def _nbytes(t) -> int:
    if t is None:
        return 0
    shape, dtype = t
    return int(np.prod(shape, dtype=np.int64)) * _DTYPE_BYTES.get(dtype, 4)


_SUB_BYTE_BITS = {"INT4": 4, "UINT4": 4, "UINT1": 1, "UINT2": 2, "UINT3": 3, "UINT6": 6}


def _payload_bytes(op) -> int:
    """Bytes of a ``constexpr_*`` op's constant parameters (attributes before iOS18,
    value-bound inputs from iOS18)."""
    values = [v for k, v in op.attributes.items() if k != "name"]
    values += [b.value for arg in op.inputs.values() for b in arg.arguments
               if b.WhichOneof("binding") == "value"]
    total = 0
    for v in values:
        t = _tensor(v.type)
        if t is None:
            continue
        bits = _SUB_BYTE_BITS.get(t[1])
        total += _nbytes(t) if bits is None else (_numel(t) * bits + 7) // 8
    return total


def _numel(t) -> int:
    return 0 if t is None else int(np.prod(t[0], dtype=np.int64))


def _flops(op, ins: Dict[str, object], outs: List[object], consts) -> int:
    t = op.type
    if t in _MOVEMENT:
        return 0
    out = outs[0] if outs else None
    if t in ("matmul", "linear"):
        x = ins.get("x")
        if x is None or out is None:
            return 0
        k = x[0][-1] if not (t == "matmul" and bool_flag(op, "transpose_x", consts.get)) else x[0][-2]
        return 2 * _numel(out) * int(k)
    if t in ("conv", "conv_transpose"):
        w, x = ins.get("weight"), ins.get("x")
        if w is None:
            return 0
        per = int(np.prod(w[0][1:], dtype=np.int64))
        return 2 * per * (_numel(x) if t == "conv_transpose" else _numel(out))
    if t in _REDUCTIONS:
        return _numel(ins.get("x"))
    return sum(_numel(o) for o in outs)


def _const_row(op, out, consts) -> dict:
    val = op.attributes["val"].immediateValue.tensor if "val" in op.attributes else None
    if val is not None and len(val.bools.values) == 1:
        consts[op.outputs[0].name] = val.bools.values[0]
    return {"type": "const", "name": op.outputs[0].name, "depth": 0,
            "flops": 0, "bytes_read": 0, "bytes_written": 0, "weight_bytes": _nbytes(out)}


def _op_row(op, outs, types, consts) -> dict:
    ins: Dict[str, object] = {}
    read = 0
    by_dtype: Dict[str, int] = {}
    for param, arg in op.inputs.items():
        for k, b in enumerate(arg.arguments):
            t = types.get(b.name) if b.WhichOneof("binding") == "name" else \
                _tensor(b.value.type)
            read += _nbytes(t)
            if t is not None:
                by_dtype[t[1]] = by_dtype.get(t[1], 0) + _nbytes(t)
            if k == 0:
                ins[param] = t
    for t in outs:
        if t is not None:
            by_dtype[t[1]] = by_dtype.get(t[1], 0) + _nbytes(t)
    return {"type": op.type, "name": op.outputs[0].name if op.outputs else "",
            "depth": 0, "flops": _flops(op, ins, outs, consts),
            "bytes_read": read, "bytes_written": sum(_nbytes(t) for t in outs),
            "weight_bytes": 0, "bytes_by_dtype": by_dtype}


def analyse(spec, function: str = "main") -> dict:
    """Cost of ``spec``'s ML Program function: totals and one row per op."""
    fn = spec.mlProgram.functions[function]
    types = {nv.name: _tensor(nv.type) for nv in fn.inputs}
    consts: Dict[str, object] = {}
    rows: List[dict] = []
    for site in walk(function_block(spec, function)):
        op = site.op
        if site.parent is not None and site.index == 0:  # entering a nested block
            types.update((nv.name, _tensor(nv.type)) for nv in site.block.inputs)
        outs = [_tensor(o.type) for o in op.outputs]
        types.update((o.name, t) for o, t in zip(op.outputs, outs))
        row = _const_row(op, outs[0], consts) if op.type == "const" else \
            _op_row(op, outs, types, consts)
        if op.type.startswith("constexpr_"):  # a weight decompressed at load: no compute
            row.update(flops=0, bytes_read=0, bytes_written=0,
                       weight_bytes=_payload_bytes(op))
        row["depth"] = site.depth
        rows.append(row)
    non_const = [r for r in rows if r["type"] != "const"]
    by_dtype: Dict[str, int] = {}
    for r in non_const:
        for dt, n in r["bytes_by_dtype"].items():
            by_dtype[dt] = by_dtype.get(dt, 0) + n
    return {
        "mil_ops": len(non_const),
        "mil_consts": len(rows) - len(non_const),
        "flops": sum(r["flops"] for r in rows),
        "bytes_read": sum(r["bytes_read"] for r in rows),
        "bytes_written": sum(r["bytes_written"] for r in rows),
        "weight_bytes": sum(r["weight_bytes"] for r in rows),
        "bytes_by_dtype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "ops": non_const,
    }


def by_type(rows: List[dict]) -> Dict[str, dict]:
    """Per-op-type sums of ``analyse(...)["ops"]``, largest FLOPs first."""
    acc: Dict[str, dict] = {}
    for r in rows:
        a = acc.setdefault(r["type"], {"count": 0, "flops": 0, "bytes_read": 0,
                                       "bytes_written": 0})
        a["count"] += 1
        for k in ("flops", "bytes_read", "bytes_written"):
            a[k] += r[k]
    return dict(sorted(acc.items(), key=lambda kv: (-kv[1]["flops"], -kv[1]["count"], kv[0])))
