"""The Core ML format (rlxjax/formats/): a ``Program`` as an ML Program in an ``.mlpackage``.

``CoreMLFormat.compile`` lowers the RLX graph to MIL (lower.py) and runs the exact MIL
peepholes (CSE, linear bias fusion); the metadata is written after it, in one place
(rlxjax/metadata.py ``describe``, from what the executable says of itself); the
``CoreMLExecutable`` it returns runs on Core ML (macOS) or the reference MIL interpreter
(interpreter/, backends.py), saves atomically (package.py), validates through coremltools' loader and
lists its MIL operations.
"""
from __future__ import annotations

import tempfile
from typing import Dict, Tuple

from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
from ..formats.base import Executable, Format
from .lower import lower_graph
from .mil_cse import mil_cse
from .mil_matmul_transpose import fold_matmul_transposes
from .mil_linear_bias import fuse_linear_bias
from .mil_order import order_for_memory
from .mil_scaled_tanh import fuse_scaled_tanh
from .package import MLPACKAGE_SUFFIX, save_mlpackage
from .targets import Target, get_target


class CoreMLExecutable(Executable):
    """A lowered ML Program: the ``Model`` protobuf and its weights folder."""

    def __init__(self, model, weights_dir: str, in_specs, out_specs, keep_alive=None):
        self.spec = model
        self.weights_dir = weights_dir
        self.input_specs = tuple(in_specs)
        self.output_specs = tuple(out_specs)
        self._keep_alive = keep_alive  # owns the temporary weights folder

    @property
    def metadata(self):
        return self.spec.description.metadata.userDefined

    @property
    def state_names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in self.spec.description.state)

    @property
    def state_graph_names(self) -> Dict[str, str]:
        return {f.shortDescription: f.name for f in self.spec.description.state}

    def state_rows(self) -> list:
        from .states import state_rows

        return state_rows(self.spec)

    def runner(self, backend: str):
        from .backends import make_backend

        return make_backend(backend, self.spec, self.weights_dir)

    def save(self, path) -> str:
        return save_mlpackage(self.spec, self.weights_dir, path)

    def validate(self):
        """coremltools' pymil Program of the model (its milproto loader's checks)."""
        from .validate import validate_model

        return validate_model(self.spec, self.weights_dir)

    def operations(self) -> list:
        """Every MIL operation in program order, an op before those in its nested (cond /
        loop) blocks (mil.py ``walk``)."""
        from .mil import function_block, operations

        return list(operations(function_block(self.spec, "main")))

    def cost(self) -> dict:
        from .cost import analyse

        return analyse(self.spec)

    def as_text(self) -> str:
        return str(self.validate())

    def memory_program(self):
        from .memory import value_program

        return value_program(self.spec)


class CoreMLFormat(Format):
    lowers_remat_barrier = True
    name = "mlpackage"
    suffix = MLPACKAGE_SUFFIX
    default_target = "iOS17"
    attention_bool_masks = True  # coreml/rules/attention.py

    def target(self, target) -> Target:
        return target if isinstance(target, Target) else get_target(target)  # (resolve_target)

    def compile(self, program, *, keep_weight_layout: bool = False) -> CoreMLExecutable:
        tmp = tempfile.TemporaryDirectory(prefix="rlxjax-weights-")
        precision = "fp32" if program.precision == "mixed" else program.precision  # its types
        model, ins, outs = lower_graph(program.graph, program.target, precision,
                                       tmp.name, states=program.states,
                                       keep_weight_layout=keep_weight_layout)
        if program.enumerated:  # flexible= with listed sizes
            from .enumerated import describe_enumerated

            ins = describe_enumerated(model, ins, program.enumerated, program.target)
        mil_cse(model)  # exact: merges ops the rules emitted twice (e.g. norm statistics)
        fuse_linear_bias(model)  # exact: a constant bias add into the linear before it
        fuse_scaled_tanh(model)  # exact: mul(tanh(x), c) as scaled_tanh(x, c, 1)
        fold_matmul_transposes(model)  # exact: a transpose next to a matmul as its flag
        order_for_memory(model)  # exact: the order of the ops only (lower peak of live values)
        return CoreMLExecutable(model, tmp.name, ins, outs, tmp)

    def save_functions(self, functions, default: str, path) -> str:
        """A multifunction ML Program (iOS18, multifunction.py)."""
        from .multifunction import merge_programs

        with tempfile.TemporaryDirectory(prefix="rlxjax-multifunction-") as tmp:
            model = merge_programs([(name, ex.spec, ex.weights_dir) for name, ex in functions],
                                   default, tmp)
            return save_mlpackage(model, tmp, path)

    def load(self, path, backend=None, function=None):
        from .loaded import load_package

        return load_package(path, backend, function)

    def check_compression(self, scheme, target) -> None:
        from .compress import check_scheme

        check_scheme(scheme, self.target(target))


FORMAT = CoreMLFormat()
