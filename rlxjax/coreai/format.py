"""The Core AI format (rlxjax/formats/): a ``Program`` as a ``coreai`` program in an
``.aimodel``, run on Apple's Core AI runtime in a worker process (worker.py).

A program's states (``state="mlstate"`` training steps) are Core AI states holding the fp32
and int32 values as they are (states/mlstate.py's ``plain`` codec: no fp16 pieces as on
Core ML); ``save_functions`` writes several programs as the functions of one asset, which
share states by name. Everything coreai-core offers is reached through ca_private.py.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import namedtuple
from typing import Dict, Tuple

from .. import metadata
from ..atomic import write_package
from ..errors import ArgumentError, RlxError
from ..formats.base import Executable, Format
from .targets import DEFAULT, Target, get_target

SUFFIX = ".aimodel"
Op = namedtuple("Op", "type")


def state_rows(specs) -> list:
    return [{"name": s.name, "mil_name": s.mil_name, "shape": list(s.shape), "dtype": s.dtype}
            for s in specs]


class CoreAIExecutable(Executable):
    def __init__(self, lowered, variants=(), specs=None):
        self.lowered = lowered      # lower.Lowered: built as function 'main' here
        # a flexible program (flexible.py): ((sizes, Lowered), ...), one static function each
        self.variants = tuple(variants)
        self.input_specs, self.output_specs = specs or (lowered.inputs, lowered.outputs)
        self.state_specs = lowered.states
        self._meta: Dict[str, str] = {}  # written by metadata.describe after compile
        from . import ca_private

        # built now, so that an op the lowering refuses is an error of compile()
        self.spec = ca_private.build(self.functions("main"))  # an AIProgram
        self._tmp = tempfile.TemporaryDirectory(prefix="rlxjax-coreai-")

    def functions(self, name: str) -> list:
        """The Core AI functions (``ca_private.Function``) of this program named ``name``:
        one, or one per enumerated shape (``name__<symbol>_<size>``, flexible.py)."""
        if not self.variants:
            return [self.lowered.function(name)]
        from .flexible import graph_name

        return [low.function(graph_name(name, sizes)) for sizes, low in self.variants]

    def metadata_as(self, name: str) -> Dict[str, str]:
        """The metadata with the Core AI functions named as for function ``name``."""
        if not self.variants:
            return self._meta
        from .flexible import SHAPES, shape_rows

        meta = dict(self._meta)
        metadata.write(meta, SHAPES, shape_rows(name, [s for s, _ in self.variants]))
        return meta

    @property
    def weights_dir(self) -> str:
        return self._tmp.name

    @property
    def metadata(self):
        return self._meta

    @property
    def state_names(self) -> Tuple[str, ...]:
        return tuple(s.mil_name for s in self.state_specs)

    @property
    def state_graph_names(self) -> Dict[str, str]:
        return {s.name: s.mil_name for s in self.state_specs}

    states_in_io = False  # under rlxjax.states: the loader reads them without the runtime

    def state_rows(self) -> list:
        return state_rows(self.state_specs)

    def own_metadata(self) -> Dict[str, object]:
        """A flexible program's functions per shape (flexible.py ``SHAPES``)."""
        if not self.variants:
            return {}
        from .flexible import SHAPES, shape_rows

        return {SHAPES: shape_rows("main", [s for s, _ in self.variants])}

    def _write(self, path: str) -> None:
        from . import ca_private

        ca_private.save(self.spec, path, dict(self._meta))

    def asset(self) -> str:
        """The program saved (with the metadata as it is now) in a temporary folder."""
        path = os.path.join(self._tmp.name, "model" + SUFFIX)
        if os.path.exists(path):
            shutil.rmtree(path)
        self._write(path)
        return path

    def runner(self, backend: str):
        if backend not in (None, "coreai"):
            raise ArgumentError(f"backend={backend!r}: an .aimodel runs on backend='coreai' "
                                "(Apple's Core AI runtime)")
        if self.variants:
            from .flexible import SHAPES
            from .loaded import ShapeRunner

            return ShapeRunner(self.asset(), metadata.read(self._meta, SHAPES),
                               self.input_specs, self.state_specs)
        from .worker import CoreAIRunner

        return CoreAIRunner(self.asset(), "main", self.state_specs)

    def save(self, path) -> str:
        return write_package(path, SUFFIX, "Core AI", self._write)

    def validate(self):
        """The program checked by the coreai dialect's own verifier; returns it."""
        from . import ca_private

        ca_private.verify(self.spec)
        return self.spec

    def operations(self) -> list:
        # MLIR text: '%3 = coreai.decomposable.broadcasting_add %1, %0 : ...'
        return [Op(t.rpartition(".")[2]) for t in
                re.findall(r"= coreai\.([a-z_0-9.]+)", self.as_text())]

    const_op = "constant"

    def cost(self) -> dict:
        ops = self.operations()
        return {"ops": len(ops), "mil_ops": sum(o.type != self.const_op for o in ops)}

    def as_text(self) -> str:
        return str(self.spec)

    def memory_program(self):
        from .memory import value_program

        return value_program(self.spec)


class CoreAIFormat(Format):
    name = "aimodel"
    suffix = SUFFIX
    default_target = DEFAULT
    attention_bool_masks = True  # coreai/ops_nn.py: select(mask, scores, lowest float)

    def target(self, target) -> Target:
        return target if isinstance(target, Target) else get_target(target)

    def compile(self, program, *, keep_weight_layout: bool = False) -> CoreAIExecutable:
        from . import flexible
        from .lower import lower_program

        if not flexible.is_flexible(program.graph):
            lowered, variants = lower_program(program), ()
            ins, outs = lowered.inputs, lowered.outputs
        elif flexible.is_range(program.graph, program.enumerated):
            # one function with dynamic dims (dynamic.py)
            lowered, variants = lower_program(program), ()
            ins, outs = flexible.flexible_specs(program.graph, program.states, lowered, {})
        else:  # one static function per enumerated shape (flexible.py)
            variants = flexible.lower_variants(program, lower_program)
            lowered = variants[0][1]
            ins, outs = flexible.flexible_specs(program.graph, program.states, lowered,
                                                program.enumerated)
        return CoreAIExecutable(lowered, variants, (ins, outs))

    def save_functions(self, functions, default: str, path) -> str:
        """One asset with a ``coreai.graph`` per function; states of the same name are one
        state to the app, which passes the same arrays to every function."""
        from . import ca_private

        names = [n for n, _ in functions]
        if len(set(names)) != len(names) or default not in names:
            raise RlxError(f"internal: functions {names}, default {default!r}")
        shapes: Dict[str, tuple] = {}
        for name, ex in functions:
            for s in ex.state_specs:
                if shapes.setdefault(s.mil_name, (s.shape, s.dtype)) != (s.shape, s.dtype):
                    raise RlxError(f"internal: state {s.mil_name} differs between functions")
        program = ca_private.build([f for name, ex in functions for f in ex.functions(name)])
        meta = metadata.merge_functions([(n, ex.metadata_as(n)) for n, ex in functions],
                                        default)
        return write_package(path, SUFFIX, "Core AI",
                             lambda p: ca_private.save(program, p, meta))

    def load(self, path, backend=None, function=None):
        from .loaded import load_asset

        return load_asset(path, backend, function)

    def check_compression(self, scheme, target) -> None:
        """Every scheme decompresses with a Core AI op on every Core AI OS (weights.py)."""
        from ..compression.schemes import check_name

        check_name(scheme)


FORMAT = CoreAIFormat()
