"""The reference interpreter: a numpy interpreter of the ML Program inside a Core ML ``Model``
protobuf, and the oracle the test suite checks rlxjax's programs with.

The program is read straight from ``coremltools.proto.MIL_pb2`` (not through coremltools' MIL
builder), so this backend is an independent check on what rlxjax emits. It stays plain:

* ``__init__`` decodes the function once (``_load_block``, the interpreter's one walk over
  the protobuf's operations, from the top block ``coreml/mil.function_block`` finds for
  every reader of a program; it recurses into nested blocks itself, as it scopes the names
  each may read): the signatures of its inputs and states, every const op's value, and per
  op an ``Op`` - its implementation (``ops.MIL_OP_IMPLS``: one function per MIL op; a method here
  for ops with nested blocks), its input bindings and its declared output types.
* ``run`` walks the ops in order (``_run_block``): per op it builds the input dict from the
  environment (value name -> value), calls the implementation and checks the outputs against
  the program's declarations. With fixed input shapes the checked feeds and consts fix every
  later value's dtype and shape, so each op is checked on its first execution; with unknown
  input dims, on every execution.

Speed is not this module's business: ``accelerated/`` (backend ``"reference-fast"``) runs the
same loaded program through prepared numpy calls and generated straight-line code, and the
test suite requires bit-identical results from both (tests/coreml/interpreter/test_accelerated_equivalence.py).
"""
from __future__ import annotations

import numpy as np

from rlxjax.errors import RlxError

from ...coreml import mil
from .ops import MIL_OP_IMPLS, OUTPUT_DTYPES_KEY, TUPLE_INPUTS, WANTS_OUTPUT_DTYPES
from .values import BlobFiles, ValueDecodeError, decode_value, tensor_signature


class ReferenceRuntimeError(RlxError, RuntimeError):
    """The reference backend could not load or execute a program (message names op and output)."""


#: How an op input is bound: ``(param, NAME, value name)``, ``(param, CONST, value)`` or, for
#: tuple inputs and multi-binding arguments, ``(param, LIST, ((NAME | CONST, payload), ...))``.
NAME, CONST, LIST = 0, 1, 2

#: Ops with nested blocks -> (number of blocks, the ReferenceProgram method that runs them).
CONTROL_OPS = {"cond": (2, "_cond"), "while_loop": (2, "_while_loop")}


def _fmt_shape(shape):
    if shape is None:
        return "(...)"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _shape_ok(shape, expected) -> bool:
    if expected is None:  # variadic rank
        return True
    return len(shape) == len(expected) and all(
        e is None or e == s for s, e in zip(shape, expected))


class Op:
    """One decoded MIL operation (not a const: consts are values of the program)."""

    __slots__ = ("type", "impl", "inputs", "outputs", "out_sigs", "extra", "blocks",
                 "unchecked")

    def __init__(self, type_, impl, inputs, outputs, out_sigs, extra, blocks):
        self.type = type_
        self.impl = impl  # ops.MIL_OP_IMPLS entry, or for control flow a program method's name
        self.inputs = inputs  # tuple of bindings, see NAME / CONST / LIST
        self.outputs = outputs  # tuple of output names
        self.out_sigs = out_sigs  # per output: declared (dtype, shape), None if not a tensor
        self.extra = extra  # dict merged into the op's inputs (declared output dtypes)
        self.blocks = blocks  # nested Blocks (cond, while_loop), else None
        self.unchecked = True  # outputs not yet checked against out_sigs

    def where(self) -> str:
        return f"op '{self.type}' (output '{self.outputs[0] if self.outputs else '?'}')"


class Block:
    """A decoded block: input names (bound per execution), ops, output names."""

    __slots__ = ("inputs", "ops", "outputs")

    def __init__(self, inputs, ops, outputs):
        self.inputs, self.ops, self.outputs = inputs, ops, outputs


def walk_ops(block: Block):
    """Every Op of a decoded block, those in nested blocks too (each before its blocks)."""
    for op in block.ops:
        yield op
        for sub in op.blocks or ():
            yield from walk_ops(sub)


class ReferenceProgram:
    def __init__(self, model, weights_dir=None, *, function="main"):
        """model: Model_pb2.Model with an mlProgram.  weights_dir: folder holding the blob file(s)
        that BlobFileValue.fileName refers to as '@model_path/weights/<file>'."""
        if model.WhichOneof("Type") != "mlProgram":
            raise ReferenceRuntimeError(
                f"model is a '{model.WhichOneof('Type')}', not an mlProgram")
        functions = model.mlProgram.functions
        if function not in functions:
            raise ReferenceRuntimeError(
                f"function '{function}' not in program (has {sorted(functions)})")
        fn = functions[function]
        if fn.opset not in fn.block_specializations:
            raise ReferenceRuntimeError(
                f"function '{function}' has no block for its opset '{fn.opset}' "
                f"(has {sorted(fn.block_specializations)})")
        self.function = function
        self.opset = fn.opset
        self.input_signatures = {}
        self.state_signatures = {}  # Core ML states (iOS18): bound by run(..., state=)
        for nvt in fn.inputs:
            try:
                if nvt.type.WhichOneof("type") == "stateType":
                    self.state_signatures[nvt.name] = tensor_signature(
                        nvt.type.stateType.wrappedType)
                else:
                    self.input_signatures[nvt.name] = tensor_signature(nvt.type)
            except ValueDecodeError as e:
                raise ReferenceRuntimeError(f"function input '{nvt.name}': {e}") from None
        # With fixed input shapes every value's type is fixed: outputs are checked on each
        # op's first execution only. Inputs with unknown dims: checked on every execution.
        self.check_always = any(shape is None or None in shape
                                for _, shape in self.input_signatures.values())
        #: input name -> per dim (lower, upper) of the model description's shapeRange
        #: (upper -1: unbounded), for flexible inputs (Core ML RangeDim)
        self.input_ranges = {
            f.name: tuple((r.lowerBound, r.upperBound)
                          for r in f.type.multiArrayType.shapeRange.sizeRanges)
            for f in model.description.input
            if f.type.WhichOneof("Type") == "multiArrayType"
            and f.type.multiArrayType.shapeRange.sizeRanges}
        #: input name -> the shapes it may take (Core ML enumerated shapes)
        self.input_shapes = {
            f.name: {tuple(e.shape) for e in f.type.multiArrayType.enumeratedShapes.shapes}
            for f in model.description.input
            if f.type.WhichOneof("Type") == "multiArrayType"
            and f.type.multiArrayType.enumeratedShapes.shapes}
        #: name -> value of every const op (bound before each run; never written)
        self.constants = {}
        #: name -> declared (dtype, shape) of every tensor value: inputs, states, op outputs
        self.signatures = {**self.input_signatures, **self.state_signatures}
        blobs = BlobFiles(weights_dir)  # every blob is read while loading
        block = mil.function_block(model, function)  # where every reader finds it
        self.body = self._load_block(block, set(self.signatures), blobs, "block")
        self.output_names = self.body.outputs

    # -- loading -------------------------------------------------------------------------------

    def _load_block(self, block, known, blobs, where) -> Block:
        """Decode one protobuf block (the only walk over the protobuf's operations).
        ``known``: names defined so far, the block's inputs included; updated in place."""
        ops = []
        for op in block.operations:
            loaded = self._load_op(op, known, blobs)
            if loaded is not None:
                ops.append(loaded)
        missing = [n for n in block.outputs if n not in known]
        if missing:
            raise ReferenceRuntimeError(f"{where} outputs {missing} are never produced")
        return Block(tuple(i.name for i in block.inputs), tuple(ops), tuple(block.outputs))

    def _load_op(self, op, known, blobs):
        outputs = tuple(o.name for o in op.outputs)
        where = f"op '{op.type}' (output '{outputs[0] if outputs else '?'}')"
        impl = (MIL_OP_IMPLS.get(op.type) if not op.blocks
                else CONTROL_OPS.get(op.type, (0, None))[1])
        if impl is None:
            raise ReferenceRuntimeError(f"{where}: unknown op type '{op.type}' "
                                        + ("with nested blocks " if op.blocks else "")
                                        + "(not implemented by the reference backend)")
        try:
            out_sigs = tuple(
                tensor_signature(o.type) if o.type.WhichOneof("type") == "tensorType" else None
                for o in op.outputs)
            if op.type == "const":
                self._load_const(where, op, outputs[0], out_sigs[0], blobs)
                known.add(outputs[0])
                return None
            if op.type.startswith("constexpr_"):  # evaluated once, here: a const value
                self._load_constexpr(where, op, impl, outputs, out_sigs, known, blobs)
                return None
            inputs = tuple(self._bind(param, arg, op.type, known, blobs)
                           for param, arg in op.inputs.items())
        except (ValueDecodeError, ReferenceRuntimeError) as e:
            raise ReferenceRuntimeError(f"{where}: {e}") from None
        extra = {}
        if op.type in WANTS_OUTPUT_DTYPES:
            extra[OUTPUT_DTYPES_KEY] = tuple(s[0] if s else None for s in out_sigs)
        blocks = self._load_nested(where, op, known, blobs) if op.blocks else None
        self.signatures.update((n, s) for n, s in zip(outputs, out_sigs) if s is not None)
        known.update(outputs)
        return Op(op.type, impl, inputs, outputs, out_sigs, extra, blocks)

    def _load_const(self, where, op, name, sig, blobs):
        if "val" not in op.attributes:
            raise ValueDecodeError("const without a 'val' attribute")
        (value,) = MIL_OP_IMPLS["const"]({"val": decode_value(op.attributes["val"], blobs)})
        if isinstance(value, np.ndarray):
            value.setflags(write=False)  # shared by every run: guard against mutation
        self._check_output(where, name, value, sig)
        self.constants[name] = value
        if sig is not None:
            self.signatures[name] = sig

    def _load_constexpr(self, where, op, impl, outputs, out_sigs, known, blobs):
        """A ``constexpr_*`` op: its parameters are attributes (before iOS18) or inputs
        bound to values or to other constexpr results (iOS18); its outputs are constants."""
        args = {k: decode_value(v, blobs) for k, v in op.attributes.items() if k != "name"}
        for param, arg in op.inputs.items():
            b = self._bind(param, arg, op.type, known, blobs)
            if b[1] == NAME:
                if b[2] not in self.constants:
                    raise ValueDecodeError(f"input '{param}' is not a constant")
                args[param] = self.constants[b[2]]
            elif b[1] == CONST:
                args[param] = b[2]
            else:
                raise ValueDecodeError(f"input '{param}' binds {len(b[2])} values")
        try:
            with np.errstate(all="ignore"):
                values = impl(args)
        except (KeyError, TypeError, ValueError, NotImplementedError) as e:
            raise ValueDecodeError(f"cannot decompress: {type(e).__name__}: {e}") from None
        for name, value, sig in zip(outputs, values, out_sigs):
            value.setflags(write=False)
            self._check_output(where, name, value, sig)
            self.constants[name] = value
            if sig is not None:
                self.signatures[name] = sig
            known.add(name)

    @staticmethod
    def _bind(param, arg, op_type, known, blobs):
        bound = []
        for b in arg.arguments:
            if b.WhichOneof("binding") == "name":
                if b.name not in known:
                    raise ValueDecodeError(f"input '{param}' uses undefined '{b.name}'")
                bound.append((NAME, b.name))
            else:
                bound.append((CONST, decode_value(b.value, blobs)))
        if len(bound) == 1 and param not in TUPLE_INPUTS.get(op_type, ()):
            return (param,) + bound[0]
        return (param, LIST, tuple(bound))

    def _load_nested(self, where, op, known, blobs):
        want = CONTROL_OPS[op.type][0]
        if len(op.blocks) != want:
            raise ReferenceRuntimeError(f"{where}: has {len(op.blocks)} blocks, expected {want}")
        n_in = 0 if op.type == "cond" else len(op.inputs["loop_vars"].arguments)
        blocks = []
        for k, blk in enumerate(op.blocks):
            if len(blk.inputs) != n_in:
                raise ReferenceRuntimeError(
                    f"{where}: block {k} has {len(blk.inputs)} inputs, expected {n_in}")
            inner = set(known) | {i.name for i in blk.inputs}
            blocks.append(self._load_block(blk, inner, blobs, f"{where}: block {k}"))
        return tuple(blocks)

    # -- running -------------------------------------------------------------------------------

    def make_state(self):
        """Zero-filled buffers for the program's states (like ``MLModel.make_state()``)."""
        from .state import ReferenceState

        return ReferenceState(self.state_signatures, owner=self)

    def run(self, feeds: dict, state=None) -> dict:
        """feeds: input name -> np.ndarray.  Returns output name -> np.ndarray in block order.
        A program with states also takes ``state`` (from ``make_state()``), updated in place."""
        env = self._check_feeds(feeds)
        if self.state_signatures or state is not None:
            if state is None:
                raise ReferenceRuntimeError(
                    f"the program has states {list(self.state_signatures)}: pass "
                    "state=program.make_state()")
            bound = state.bind(self)
            # the run writes copies, committed when it completes: a run stopped by an
            # error or a Ctrl-C leaves the state as it was (a training step's last step)
            work = {n: b.copy() for n, b in bound.items()}
            env.update(work)
        env.update(self.constants)
        # Inf / NaN are legitimate results of the simulated arithmetic: no numpy warnings.
        with np.errstate(all="ignore"):
            values = self._run_function(env)
        if state is not None:
            for n, b in bound.items():
                b[...] = work[n]
        # Copies: outputs must not alias feeds, consts or each other.
        return {n: np.array(v, copy=True) for n, v in zip(self.output_names, values)}

    def _check_feeds(self, feeds) -> dict:
        unknown = [k for k in feeds if k not in self.input_signatures]
        if unknown:
            raise ReferenceRuntimeError(
                f"unknown input name(s) {unknown}; the function takes "
                f"{list(self.input_signatures)}")
        env = {}
        for name, (dtype, shape) in self.input_signatures.items():
            if name not in feeds:
                raise ReferenceRuntimeError(
                    f"missing input '{name}' (expected {dtype}{_fmt_shape(shape)})")
            v = feeds[name]
            if not isinstance(v, np.ndarray):
                v = np.asarray(v)
            if v.dtype != dtype:
                raise ReferenceRuntimeError(
                    f"input '{name}' has dtype {v.dtype}, expected {dtype}")
            if not _shape_ok(v.shape, shape):
                raise ReferenceRuntimeError(
                    f"input '{name}' has shape {v.shape}, expected {_fmt_shape(shape)}")
            ranges = self.input_ranges.get(name)
            if ranges is not None and len(ranges) == v.ndim and any(
                    s < lo or (hi >= 0 and s > hi) for s, (lo, hi) in zip(v.shape, ranges)):
                raise ReferenceRuntimeError(
                    f"input '{name}' has shape {v.shape}, outside the flexible shape range "
                    f"{[(lo, hi if hi >= 0 else 'unbounded') for lo, hi in ranges]} of the "
                    "model description (Core ML refuses it too)")
            shapes = self.input_shapes.get(name)
            if shapes is not None and tuple(v.shape) not in shapes:
                raise ReferenceRuntimeError(
                    f"input '{name}' has shape {v.shape}, not one of the enumerated shapes "
                    f"{sorted(shapes)} of the model description (Core ML refuses it too)")
            env[name] = v
        return env

    def _run_function(self, env) -> list:
        """The function's outputs, given its inputs, states and constants in ``env``."""
        return self._run_block(self.body, env)

    def _run_block(self, block, env, values=()) -> list:
        """Run a block's ops, reading and writing values in ``env`` (MIL names are unique
        across a function, so nested blocks share their enclosing environment)."""
        for name, v in zip(block.inputs, values):
            env[name] = v
        for op in block.ops:
            for name, value in zip(op.outputs, self._execute(op, env)):
                env[name] = value
        return [env[n] for n in block.outputs]

    def _execute(self, op, env) -> tuple:
        """The op's outputs, checked against the program's declarations; an exception
        from its implementation becomes a ReferenceRuntimeError naming the op."""
        try:
            results = self._call(op, env)
        except ReferenceRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - re-raised with op context
            raise self.op_error(op, e) from e
        if op.unchecked:
            self._check_op(op, results)
        return results

    def _call(self, op, env) -> tuple:
        """The op's outputs: its implementation applied to its inputs, read from ``env``."""
        inputs = dict(op.extra)
        for param, kind, payload in op.inputs:
            if kind == NAME:
                inputs[param] = env[payload]
            elif kind == CONST:
                inputs[param] = payload
            else:
                inputs[param] = [env[p] if k == NAME else p for k, p in payload]
        if op.blocks is not None:
            return getattr(self, op.impl)(op, inputs, env)
        return op.impl(inputs)

    @staticmethod
    def op_error(op, e) -> ReferenceRuntimeError:
        """The error for an exception raised while running ``op``."""
        return ReferenceRuntimeError(f"{op.where()}: {type(e).__name__}: {e}")

    # -- control flow ---------------------------------------------------------------------------

    def _cond(self, op, inputs, env):
        pred = np.asarray(inputs["pred"])
        if pred.dtype != np.bool_ or pred.size != 1:
            raise ValueError(f"pred must be a bool scalar, got {pred.dtype}{list(pred.shape)}")
        return self._run_block(op.blocks[0] if bool(pred) else op.blocks[1], env)

    def _while_loop(self, op, inputs, env):
        values = list(inputs["loop_vars"])
        cond, body = op.blocks
        while True:
            (pred,) = self._run_block(cond, env, values)
            if not bool(np.asarray(pred)):
                return values
            values = self._run_block(body, env, values)

    # -- checking outputs -----------------------------------------------------------------------

    def _check_op(self, op, results) -> None:
        """An execution's outputs against the program's declarations."""
        if len(results) != len(op.outputs):
            raise ReferenceRuntimeError(
                f"{op.where()}: produced {len(results)} outputs, program declares "
                f"{len(op.outputs)}")
        for name, value, sig in zip(op.outputs, results, op.out_sigs):
            self._check_output(op.where(), name, value, sig)
        op.unchecked = self.check_always

    @staticmethod
    def _check_output(where, name, value, sig):
        if sig is None:
            return
        dtype, shape = sig
        if isinstance(value, str):
            if dtype.kind != "U":
                raise ReferenceRuntimeError(f"{where}: output '{name}' is a string, "
                                            f"declared {dtype}")
            return
        if not isinstance(value, np.ndarray):
            raise ReferenceRuntimeError(f"{where}: output '{name}' is a {type(value).__name__}, "
                                        "not an ndarray (reference backend bug)")
        if value.dtype != dtype or not _shape_ok(value.shape, shape):
            raise ReferenceRuntimeError(
                f"{where}: output '{name}' is {value.dtype}{_fmt_shape(value.shape)} but the "
                f"program declares {dtype}{_fmt_shape(shape)}")
