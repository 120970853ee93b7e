"""A numpy interpreter of the ML Program inside a Core ML ``Model`` protobuf.

The program is read straight from ``coremltools.proto.MIL_pb2`` (not through coremltools' MIL
builder) so this backend is an independent check on what rlxjax emits.  All protobuf work -
decoding consts and immediate values, reading weight blobs, resolving op implementations - is
done once in ``__init__``; ``run`` walks a flat list of prepared steps.

Each step is prepared into one callable ``step.run(env) -> outputs``: a fast path from
``fast.py`` where the op and its declared input types allow one (the same numpy calls as the
general implementation, decided once), else a closure that builds the op's input dict and calls
the general implementation; an op with nested blocks (cond, while_loop) is a single step whose
function runs its prepared sub-blocks. Each step's outputs are checked against the program's
declared types on that step's first execution (the checked feeds and consts fix every later
value's dtype and shape). Once all are checked, a program without nested blocks runs as one
generated straight-line function (``codegen.py``) making the same calls.
"""
from __future__ import annotations

import numpy as np

from rlxjax.errors import RlxError

from .codegen import straight_line
from .fast import fast_step
from .ops import OPS, OUTPUT_DTYPES_KEY, TUPLE_INPUTS, WANTS_OUTPUT_DTYPES
from .values import BlobFiles, ValueDecodeError, decode_value, tensor_signature


class ReferenceRuntimeError(RlxError, RuntimeError):
    """The reference backend could not load or execute a program (message names op and output)."""


# Ops with nested blocks: the ReferenceProgram method that runs them.
_CONTROL = {"cond": "_cond", "while_loop": "_while_loop"}

# Binding kinds of a prepared op input.
_NAME, _CONST, _LIST = 0, 1, 2


def _fmt_shape(shape):
    if shape is None:
        return "(...)"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _shape_ok(shape, expected) -> bool:
    if expected is None:  # variadic rank
        return True
    return len(shape) == len(expected) and all(
        e is None or e == s for s, e in zip(shape, expected))


class _Step:
    __slots__ = ("fn", "op_type", "inputs", "outputs", "out_sigs", "extra", "blocks", "run",
                 "call", "unchecked")

    def __init__(self, fn, op_type, inputs, outputs, out_sigs, extra, blocks=None):
        self.fn = fn
        self.op_type = op_type
        self.inputs = inputs  # tuple of (param, kind, payload)
        self.outputs = outputs  # tuple of output names
        self.out_sigs = out_sigs  # tuple of (dtype, shape) or None (non-tensor output)
        self.extra = extra  # dict merged into the op's inputs (e.g. declared output dtypes)
        self.blocks = blocks  # control flow: tuple of _Block; fn is then a method of
        # ReferenceProgram taking (step, inputs, env)
        self.run = None  # env -> tuple of outputs (set by ReferenceProgram._prepare_op)
        self.call = None  # fast.FastCall where the op has a fast path
        self.unchecked = True  # outputs not yet checked against out_sigs

    def where(self) -> str:
        return f"op '{self.op_type}' (output '{self.outputs[0] if self.outputs else '?'}')"


def _general(step):
    """run(env) for a step without a fast path: the op's input dict, then its implementation."""
    fn, extra, blocks = step.fn, step.extra, step.blocks
    names = tuple((p, payload) for p, kind, payload in step.inputs if kind == _NAME)
    base = dict(extra)
    base.update((p, payload) for p, kind, payload in step.inputs if kind == _CONST)
    lists = tuple((p, payload) for p, kind, payload in step.inputs if kind == _LIST)

    def run(env):
        kwargs = base.copy()
        for p, n in names:
            kwargs[p] = env[n]
        for p, payload in lists:
            kwargs[p] = [env[q] if k == _NAME else q for k, q in payload]
        return fn(kwargs) if blocks is None else fn(step, kwargs, env)

    return run


class _Block:
    """A prepared nested block: input names (bound per execution), steps, output names."""

    __slots__ = ("inputs", "steps", "outputs")

    def __init__(self, inputs, steps, outputs):
        self.inputs = inputs
        self.steps = steps
        self.outputs = outputs


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
        block = fn.block_specializations[fn.opset]
        self.function = function
        self.opset = fn.opset
        self._blobs = BlobFiles(weights_dir)

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
        # step's first execution only. Inputs with unknown dims: checked on every execution.
        self._check_always = any(shape is None or None in shape
                                 for _, shape in self.input_signatures.values())
        self._program = None  # generated on the first run after every step was checked
        self._consts = {}
        self._sigs = {**self.input_signatures, **self.state_signatures}  # name -> (dtype, shape)
        self._steps = []
        known = set(self._sigs)
        for op in block.operations:
            self._prepare_op(op, known)
        missing = [n for n in block.outputs if n not in known]
        if missing:
            raise ReferenceRuntimeError(f"block outputs {missing} are never produced")
        self.output_names = tuple(block.outputs)
        self._steps = tuple(self._steps)
        self._blobs = None  # every blob has been read; drop the file handles
        self._sigs = None

    # -- loading -------------------------------------------------------------------------------

    def _prepare_op(self, op, known):
        outputs = tuple(o.name for o in op.outputs)
        where = f"op '{op.type}' (output '{outputs[0] if outputs else '?'}')"
        impl = OPS.get(op.type) if not op.blocks else _CONTROL.get(op.type)
        if impl is None:
            raise ReferenceRuntimeError(f"{where}: unknown op type '{op.type}' "
                                        + ("with nested blocks " if op.blocks else "")
                                        + "(not implemented by the reference backend)")
        try:
            out_sigs = tuple(
                tensor_signature(o.type) if o.type.WhichOneof("type") == "tensorType" else None
                for o in op.outputs)
            if op.type == "const":
                if "val" not in op.attributes:
                    raise ValueDecodeError("const without a 'val' attribute")
                value = decode_value(op.attributes["val"], self._blobs)
                (value,) = impl({"val": value})
                if isinstance(value, np.ndarray):
                    value.setflags(write=False)  # shared by every run: guard against mutation
                self._consts[outputs[0]] = value
                self._check_output(where, outputs[0], value, out_sigs[0])
                known.add(outputs[0])
                return
            tuple_params = TUPLE_INPUTS.get(op.type, frozenset())
            inputs = []
            for param, arg in op.inputs.items():
                bound = []
                for b in arg.arguments:
                    if b.WhichOneof("binding") == "name":
                        if b.name not in known:
                            raise ValueDecodeError(f"input '{param}' uses undefined '{b.name}'")
                        bound.append((_NAME, b.name))
                    else:
                        bound.append((_CONST, decode_value(b.value, self._blobs)))
                if len(bound) == 1 and param not in tuple_params:
                    inputs.append((param,) + bound[0])
                else:
                    inputs.append((param, _LIST, tuple(bound)))
        except (ValueDecodeError, ReferenceRuntimeError) as e:
            raise ReferenceRuntimeError(f"{where}: {e}") from None
        extra = {}
        if op.type in WANTS_OUTPUT_DTYPES:
            extra[OUTPUT_DTYPES_KEY] = tuple(s[0] if s else None for s in out_sigs)
        blocks = None
        if op.blocks:
            blocks = self._prepare_blocks(where, op, known)
            impl = getattr(self, impl)
        step = _Step(impl, op.type, tuple(inputs), outputs, out_sigs, extra, blocks)
        step.call = None if blocks else fast_step(op.type, step.inputs, self._sigs, out_sigs,
                                                  self._consts)
        step.run = step.call.runner() if step.call else _general(step)
        self._steps.append(step)
        self._sigs.update((n, s) for n, s in zip(outputs, out_sigs) if s is not None)
        known.update(outputs)

    def _prepare_blocks(self, where, op, known):
        want = 2 if op.type in ("cond", "while_loop") else None
        if len(op.blocks) != want:
            raise ReferenceRuntimeError(f"{where}: has {len(op.blocks)} blocks, expected {want}")
        n_in = 0 if op.type == "cond" else len(op.inputs["loop_vars"].arguments)
        blocks, outer = [], self._steps
        try:
            for k, blk in enumerate(op.blocks):
                if len(blk.inputs) != n_in:
                    raise ReferenceRuntimeError(
                        f"{where}: block {k} has {len(blk.inputs)} inputs, expected {n_in}")
                inner = set(known) | {i.name for i in blk.inputs}
                self._steps = []
                for sub in blk.operations:
                    self._prepare_op(sub, inner)
                missing = [n for n in blk.outputs if n not in inner]
                if missing:
                    raise ReferenceRuntimeError(
                        f"{where}: block {k} outputs {missing} are never produced")
                blocks.append(_Block(tuple(i.name for i in blk.inputs), tuple(self._steps),
                                     tuple(blk.outputs)))
        finally:
            self._steps = outer
        return tuple(blocks)

    # -- control flow ---------------------------------------------------------------------------

    def _run_block(self, block, env, values=()):
        for name, v in zip(block.inputs, values):
            env[name] = v
        self._exec(block.steps, env)
        return [env[n] for n in block.outputs]

    def _cond(self, step, inputs, env):
        pred = np.asarray(inputs["pred"])
        if pred.dtype != np.bool_ or pred.size != 1:
            raise ValueError(f"pred must be a bool scalar, got {pred.dtype}{list(pred.shape)}")
        return self._run_block(step.blocks[0] if bool(pred) else step.blocks[1], env)

    def _while_loop(self, step, inputs, env):
        values = list(inputs["loop_vars"])
        cond, body = step.blocks
        while True:
            (pred,) = self._run_block(cond, env, values)
            if not bool(np.asarray(pred)):
                return values
            values = self._run_block(body, env, values)

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

    # -- running -------------------------------------------------------------------------------

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
            env[name] = v
        return env

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
            env.update(state.bind(self))
        env.update(self._consts)
        # Inf / NaN are legitimate results of the simulated arithmetic: no numpy warnings.
        with np.errstate(all="ignore"):
            if self._program is None and not any(st.unchecked for st in self._steps):
                self._program = self._straight_line()
            if self._program:
                values = self._program(env)
            else:
                self._exec(self._steps, env)
                values = [env[n] for n in self.output_names]
        # Copies: outputs must not alias feeds, consts or each other.
        return {n: np.array(v, copy=True) for n, v in zip(self.output_names, values)}

    def _straight_line(self):
        """The generated function for every later run (codegen.py), or False where the
        step loop stays: nested blocks, or outputs checked on every run."""
        if self._check_always or any(st.blocks for st in self._steps):
            return False

        def error(i, e):
            return ReferenceRuntimeError(f"{self._steps[i].where()}: {type(e).__name__}: {e}")

        return straight_line(self._steps, self.output_names, error, ReferenceRuntimeError)

    def _exec(self, steps, env) -> None:
        """Run prepared steps, reading and writing values in ``env`` (MIL names are unique
        across a function, so nested blocks share their enclosing environment)."""
        for step in steps:
            try:
                results = step.run(env)
            except ReferenceRuntimeError:
                raise
            except Exception as e:  # noqa: BLE001 - re-raised with op context
                raise ReferenceRuntimeError(
                    f"{step.where()}: {type(e).__name__}: {e}") from e
            if step.unchecked:
                self._check_step(step, results)
            for name, value in zip(step.outputs, results):
                env[name] = value

    def _check_step(self, step, results) -> None:
        """First execution of a step: its outputs against the program's declarations."""
        if len(results) != len(step.outputs):
            raise ReferenceRuntimeError(
                f"{step.where()}: produced {len(results)} outputs, program declares "
                f"{len(step.outputs)}")
        for name, value, sig in zip(step.outputs, results, step.out_sigs):
            self._check_output(step.where(), name, value, sig)
        step.unchecked = self._check_always
