"""Every use of coreai-core (Apple's Core AI authoring API and runtime), in one module.

coreai-core is young (1.0.0b3) and its authoring API builds a graph from a Python function's
annotations; this module pins the version it was written against, turns the missing package
into a clear error, and offers what the lowering needs: ``build`` (a program from input and
output specs and a body), ``save`` (an ``.aimodel`` with rlxjax's metadata as custom
metadata) and ``executable`` / ``to_runtime`` / ``runtime_ndarray`` / ``runtime_buffer`` /
``runtime_numpy_dtype`` (used only by serve.py and rt_arrays.py, in a worker process: the
runtime kills the process on some bad programs).
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from ..errors import BackendUnavailableError

#: the coreai-core version this module was written and tested against
PINNED = "1.0.0b3"
_INSTALL = 'pip install "rlxjax[coreai]"'

Spec = Tuple[str, Tuple[int, ...], str]  # (name, shape, numpy dtype name)


_AUTHORING = []  # coreai.authoring once its version was checked


def coreai():
    """``coreai.authoring``, or a clear error naming the extra to install. The version is
    checked once: the lowering calls this for each constant, and reading the installed
    version (importlib.metadata) took ~3 ms each time, ~30 % of a 30-layer LoRA step's
    Core AI compile."""
    if _AUTHORING:
        return _AUTHORING[0]
    try:
        version = importlib.metadata.version("coreai-core")
    except importlib.metadata.PackageNotFoundError:
        raise BackendUnavailableError(
            f"format='aimodel' needs Apple's coreai-core: {_INSTALL}") from None
    if version != PINNED:
        raise BackendUnavailableError(
            f"format='aimodel' was written against coreai-core {PINNED}, found {version}: "
            f'pip install "coreai-core=={PINNED}"')
    import coreai.authoring as ca

    _AUTHORING.append(ca)
    return ca


def constant(value):
    """A ``coreai.constant`` holding ``value`` (a numpy array, its dtype kept)."""
    coreai()
    from coreai.authoring.constant import constant as make

    return make(value)


def buffer_constant(buffer: np.ndarray, shape, element: str):
    """A ``coreai.constant`` whose data is ``buffer``'s memory, not a copy of it (an MLIR
    ``DenseResourceElementsAttr`` over the buffer, kept alive by the program): ``element``
    ``"f32"``, ``"si8"`` / ``"ui8"`` (one value a byte) or ``"si4"`` (two values a byte, the
    first in the low nibble). ``constant`` copies its array into the program (coreai-core's
    ``create_elements_attr``) and stores a 4-bit array one value a byte."""
    coreai()
    from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
    from coreai._compiler.ir import (DenseResourceElementsAttr, F32Type, IntegerType,
                                     RankedTensorType)
    from coreai.authoring.operation import Value

    bits = {"f32": 32, "si8": 8, "ui8": 8, "si4": 4}[element]
    elem = F32Type.get() if element == "f32" else \
        (IntegerType.get_unsigned if element == "ui8" else IntegerType.get_signed)(bits)
    count = int(np.prod(shape, dtype=np.int64))
    if buffer.nbytes != -(-count * bits // 8) or buffer.itemsize * 8 not in (bits, 8):
        raise ValueError(f"internal: {buffer.nbytes} bytes for {count} {element} values")
    attr = DenseResourceElementsAttr.get_from_buffer(
        np.ascontiguousarray(buffer).reshape(-1), "weight",
        RankedTensorType.get(list(shape), elem))
    return Value._from_mlir(ConstantOp(value=attr).result)  # noqa: SLF001


def zeros_si4(shape):
    """A ``coreai.constant`` of 4-bit zeros of ``shape``: a splat (one value in the asset)."""
    coreai()
    from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
    from coreai._compiler.ir import DenseElementsAttr, IntegerAttr, IntegerType, RankedTensorType
    from coreai.authoring.operation import Value

    si4 = IntegerType.get_signed(4)
    attr = DenseElementsAttr.get_splat(RankedTensorType.get(list(shape), si4),
                                       IntegerAttr.get(si4, 0))
    return Value._from_mlir(ConstantOp(value=attr).result)  # noqa: SLF001


def splat(value, shape):
    """A ``coreai.constant`` of ``shape`` holding the numpy scalar ``value`` everywhere: one
    value in the asset, no array of ``shape`` made here."""
    coreai()
    from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
    from coreai._compiler.ir import DenseElementsAttr, RankedTensorType
    from coreai.authoring.operation import Value

    one = DenseElementsAttr.get(np.asarray([value]))
    attr = DenseElementsAttr.get_splat(RankedTensorType.get(list(shape), one.type.element_type),
                                       one.get_splat_value())
    return Value._from_mlir(ConstantOp(value=attr).result)  # noqa: SLF001


def dtype(name: str):
    ca = coreai()
    return {"float32": ca.float32, "float16": ca.float16, "int32": ca.int32,
            "bool": ca.bool_}[name]


@dataclass(frozen=True)
class Function:
    """One function of a program: its named tensor inputs, its states (each a
    ``!coreai.handle`` of a tensor, read when the call starts, written when it ends) and
    outputs, and ``body(input values, state values) -> (output values, {state index:
    new value})``."""

    name: str
    inputs: Sequence[Spec]
    states: Sequence[Spec]
    outputs: Sequence[Spec]
    body: Callable


def build(functions: Sequence[Function]):
    """An ``AIProgram`` with ``functions`` (each a ``coreai.graph``). The graphs are built
    through the dialect's ``GraphOp`` (the authoring API's ``@graph`` takes no handles):
    each state is read with a fresh token when the call starts and, when the function
    updates it, written after everything else with the token of that read, and every
    state's last token is a graph result (a write whose token is not returned is dropped
    by the runtime; token results follow the states' order)."""
    ca = coreai()
    from coreai._compiler.dialects import coreai as cd
    from coreai.authoring._ops import unwrap_value
    from coreai.authoring.operation import Value

    def tensor(spec):
        name, shape, dt = spec
        return ca.TensorSpec(tuple(shape), dtype(dt), name=name)._to_mlir_type()  # noqa: SLF001

    module = ca.Module.create()
    with module:
        for f in functions:
            names = [s[0] for s in f.inputs] + [s[0] for s in f.states]
            tokens = [f"{s[0]}__token" for s in f.states]
            graph = cd.GraphOp(
                f.name,
                input_types=[tensor(s) for s in f.inputs] +
                [cd.HandleType.get(tensor(s)) for s in f.states],
                result_types=[tensor(s) for s in f.outputs] + [cd.TokenType.get()] * len(tokens),
                input_names=names, result_names=[s[0] for s in f.outputs] + tokens)
            with graph.block:
                args = list(graph.arguments)
                handles, last, reads = args[len(f.inputs):], [], []
                for h in handles:
                    value, token = cd.read_handle(h, cd.create_token())
                    reads.append(Value._from_mlir(value))  # noqa: SLF001
                    last.append(token)
                outs, writes = f.body([Value._from_mlir(a)  # noqa: SLF001
                                       for a in args[:len(f.inputs)]], reads)
                for i, v in sorted(writes.items()):
                    last[i] = cd.write_handle(handles[i], unwrap_value(v), last[i])
                cd.OutputOp([unwrap_value(o) for o in outs] + last)
    return ca.AIProgram(module)


def verify(program) -> None:
    """Run the coreai dialect's verifier on ``program`` (``ValidationError`` on failure).
    (``AIProgram`` keeps its authoring ``Module`` in a private attribute: read here only.)"""
    from ..errors import ValidationError

    try:
        program._module.verify()  # noqa: SLF001
    except Exception as e:  # noqa: BLE001 - any verifier failure is a bug in the lowering
        raise ValidationError(f"the coreai dialect's verifier rejected the program: "
                              f"{type(e).__name__}: {e}") from e


def save(program, path: str, metadata: Dict[str, str]) -> None:
    """Write ``program`` as the ``.aimodel`` folder ``path`` (which must not exist), with
    ``metadata`` as its custom metadata (rlxjax/metadata.py's keys, JSON strings).

    The steps of coreai-core's ``AIProgram.save_asset`` (a new asset, the bytecode, the
    producer's stamp, the bytecode's sha256 in ``main.hash``), but the hash is read from
    the file in pieces: ``save_asset`` reads the whole bytecode into memory for it, a
    second copy of every weight at the peak of the save (473 MiB for Qwen2.5-0.5B int8)."""
    import hashlib
    import time
    from pathlib import Path

    coreai()
    from coreai.authoring.asset import _COREAI_PRODUCER
    from coreai.runtime import _AIModelAsset

    path = Path(path)
    if path.suffix != ".aimodel":
        raise ValueError(f"internal: {path} is not an .aimodel path")
    path.mkdir(parents=True)
    asset = _AIModelAsset._create(path=str(path))  # noqa: SLF001
    program._save_bytecode(asset._program_bytecode_path)  # noqa: SLF001

    def update(m):
        m.creation_date = time.time()
        m._producer = _COREAI_PRODUCER  # noqa: SLF001
        for k, v in metadata.items():
            m.set_custom(k, v)

    asset.update_metadata(updates=update)
    digest = hashlib.sha256()
    with open(asset._program_bytecode_path, "rb") as f:  # noqa: SLF001
        for piece in iter(lambda: f.read(1 << 22), b""):
            digest.update(piece)
    asset._program_hash_path.write_bytes(digest.digest())  # noqa: SLF001


def read_metadata(path: str) -> Dict[str, str]:
    ca = coreai()
    meta = ca.AIModelAsset.load(path).metadata.creator_defined_metadata
    return {k: v for k, v in meta.items() if isinstance(v, str)}


def executable(path: str):
    """``async with executable(path) as model``: the asset at ``path`` compiled and loaded
    on the runtime (serve.py, in the worker process only: the runtime kills the process on
    some bad programs); ``model.load_function(name)`` gives an awaitable function of
    ``{name: runtime array}`` (and ``state=``) returning ``{name: runtime array}``."""
    return coreai().AIModelAsset.load(path).executable()


def to_runtime(value: np.ndarray):
    """A Core AI runtime array holding a copy of ``value``."""
    from coreai.runtime import NDArray

    return NDArray(np.ascontiguousarray(value))


def runtime_ndarray():
    """coreai-core's runtime array class (``NDArray(numpy)``, ``NDArray.from_descriptor``)."""
    from coreai.runtime import NDArray

    return NDArray


def runtime_buffer(array) -> memoryview:
    """The buffer of a runtime array's own memory (coreai-core 1.0.0b3 exports it read-only,
    format ``B`` with the element's size as item size: rt_arrays.py checks the layout)."""
    return memoryview(array._tensor)  # noqa: SLF001 - private in coreai-core 1.0.0b3


def runtime_numpy_dtype(name: str):
    """The numpy dtype of a runtime dtype name (None for one numpy has no plain dtype of:
    the sub-byte types, packed below a byte per element)."""
    if name in ("int2", "uint2", "int4", "uint4", "float4e2m1fn"):
        return None
    from coreai.runtime._ndarray import _RUNTIME_TO_NUMPY_DTYPE

    try:
        return np.dtype(_RUNTIME_TO_NUMPY_DTYPE.get(name, name))
    except TypeError:
        return None


# -- control flow: coreai's while / if, private in coreai-core 1.0.0b3 ----------------------
def _raw_dialect():
    coreai()  # the private dialect module is imported after coreai.authoring
    from coreai._compiler.dialects import coreai as raw
    from coreai.authoring.operation import Value

    return raw, Value


def tensor_type(shape, dtype_name: str):
    """The raw MLIR tensor type of ``shape`` / ``dtype_name`` (the results of an ``if``)."""
    ca = coreai()
    return ca.TensorType(tuple(shape), dtype(dtype_name))._to_mlir()  # noqa: SLF001


def while_loop(inits, cond: Callable, body: Callable) -> list:
    """``coreai.while`` over the loop-carried ``inits`` (authoring values): ``cond(carry)``
    returns a rank-0 bool value, ``body(carry)`` the next carry; returns the final carry."""
    raw, Value = _raw_dialect()
    raw_inits = [v._to_mlir() for v in inits]  # noqa: SLF001
    results, (before, after) = raw.while_([v.type for v in raw_inits], raw_inits)
    with before:
        pred = cond([Value._from_mlir(a) for a in before.arguments])  # noqa: SLF001
        raw.condition(pred._to_mlir(), *before.arguments)  # noqa: SLF001
    with after:
        nxt = body([Value._from_mlir(a) for a in after.arguments])  # noqa: SLF001
        raw.yield_([v._to_mlir() for v in nxt])  # noqa: SLF001
    return _results(results, Value)


def if_else(pred, result_types, then: Callable, other: Callable) -> list:
    """``coreai.if`` on the rank-0 bool ``pred``: ``then()`` / ``other()`` build a branch
    and return its values (of ``result_types``, raw types from ``tensor_type``)."""
    raw, Value = _raw_dialect()
    results, (then_b, else_b) = raw.if_(list(result_types), pred._to_mlir())  # noqa: SLF001
    for builder, fn in ((then_b, then), (else_b, other)):
        with builder:
            raw.yield_([v._to_mlir() for v in fn()])  # noqa: SLF001
    return _results(results, Value)


def _results(results, Value) -> list:
    if not isinstance(results, (list, tuple)) and hasattr(results, "type"):
        return [Value._from_mlir(results)]  # noqa: SLF001
    return [Value._from_mlir(r) for r in results]  # noqa: SLF001


def typed(op: str, out_shape, dtype_name: str, **operands):
    """The coreai op ``op`` (the private dialect's builder) with its result type given:
    ``out_shape`` / ``dtype_name``. The authoring API infers a dynamic shape for some ops
    whose shape operand is a constant (``broadcast_to``, ``gather_along_axis``), which
    Core AI's compiler then rejects."""
    _, Value = _raw_dialect()
    from coreai._compiler.dialects import _coreai_ops_gen as gen

    args = {k: (v._to_mlir() if isinstance(v, Value) else constant(v)._to_mlir())  # noqa: SLF001
            for k, v in operands.items()}
    out = getattr(gen, op)(**args, results=[tensor_type(out_shape, dtype_name)])
    return Value._from_mlir(out)  # noqa: SLF001


# -- reading an asset's program signature (rlxjax/package_check.py) ----------------------
_ELEMENT = {"f32": "float32", "f16": "float16", "si32": "int32", "i32": "int32",
            "ui32": "uint32", "si8": "int8", "i8": "int8", "ui8": "uint8", "i1": "bool",
            "si16": "int16", "ui16": "uint16"}


def _tensor_row(name: str, text: str):
    import re

    m = re.fullmatch(r"tensor<((?:(?:\d+|\?)x)*)(\w+)>", text)
    if m is None or m.group(2) not in _ELEMENT:
        raise ValueError(f"{name}: unexpected type {text}")
    dims = tuple(None if d == "?" else int(d) for d in m.group(1).split("x")[:-1])
    return name, dims, _ELEMENT[m.group(2)]


def signatures(path: str) -> Dict[str, dict]:
    """Each ``coreai.graph`` of the asset at ``path`` as it declares itself: {function:
    {"inputs": [row], "states": [row], "outputs": [row]}}, rows (name, shape, numpy dtype
    name). Parsed here, without the runtime (``main.hash`` is checked first by the caller);
    ``ValueError`` for anything unexpected."""
    import re

    ca = coreai()
    module = ca.AIModelAsset.load(path).program._module._mlir_module  # noqa: SLF001
    out: Dict[str, dict] = {}

    def names(attr, n):
        got = [re.search(r'coreai\.name = "([^"]*)"', str(attr[k])) for k in range(n)]
        if not all(got):
            raise ValueError("a graph argument or result without a coreai.name")
        return [g.group(1) for g in got]

    for op in module.body.operations:
        if op.name != "coreai.graph":
            continue
        fname = str(op.attributes["sym_name"]).strip('"')
        ftype = op.attributes["function_type"].value
        ins, res = [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
        in_names = names(op.attributes["arg_attrs"], len(ins))
        res_names = names(op.attributes["res_attrs"], len(res))
        row = {"inputs": [], "states": [], "outputs": []}
        for n, t in zip(in_names, ins):
            h = re.fullmatch(r"!coreai\.handle<(.*)>", t)
            row["states" if h else "inputs"].append(_tensor_row(n, h.group(1) if h else t))
        for n, t in zip(res_names, res):
            if t != "!coreai.token":
                row["outputs"].append(_tensor_row(n, t))
        out[fname] = row
    return out
