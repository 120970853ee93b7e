"""The Core AI format (rlxjax/formats/): a ``Program`` as a ``coreai`` program in an
``.aimodel``, run on Apple's Core AI runtime in a worker process (worker.py).

First slice: forward and gradient programs of the ops lower.py knows, fp32, static shapes,
no states, saved and loaded (loaded.py); everything else is refused with an error naming
what is missing.
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


class CoreAIExecutable(Executable):
    def __init__(self, program, asset_dir: str, in_specs, out_specs, meta: Dict[str, str],
                 keep_alive):
        self.spec = program          # coreai.authoring.AIProgram
        self.weights_dir = asset_dir  # the saved .aimodel the runtime loads
        self.input_specs, self.output_specs = tuple(in_specs), tuple(out_specs)
        self._meta = meta
        self._keep_alive = keep_alive

    @property
    def metadata(self):
        return self._meta

    @property
    def state_names(self) -> Tuple[str, ...]:
        return ()

    def _write(self, path: str) -> None:
        from . import ca_private

        ca_private.save(self.spec, path, dict(self._meta))

    def asset(self) -> str:
        """The program saved (with the metadata as it is now) in a temporary folder."""
        path = os.path.join(self._keep_alive.name, "model" + SUFFIX)
        if os.path.exists(path):
            shutil.rmtree(path)
        self._write(path)
        return path

    def runner(self, backend: str):
        if backend not in (None, "coreai"):
            raise ArgumentError(f"backend={backend!r}: an .aimodel runs on backend='coreai' "
                                "(Apple's Core AI runtime)")
        return CoreAIRunner(self.asset())

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


class CoreAIRunner:
    """Runs the program in a persistent worker process (worker.Session), started on the
    first call: the asset is compiled and loaded once for every call of this program."""

    def __init__(self, asset: str):
        self.asset = asset
        self._session = None

    def run(self, feeds, state=None):
        if state is not None:
            raise ArgumentError("this Core AI program has no states")
        from .worker import Session

        if self._session is None or self._session.proc.poll() is not None:
            self._session = Session(self.asset, "main")
        return self._session(feeds)

    def make_state(self):
        raise ArgumentError("this Core AI program has no states")


class CoreAIFormat(Format):
    name = "aimodel"
    suffix = SUFFIX
    default_target = DEFAULT

    def target(self, target) -> Target:
        return target if isinstance(target, Target) else get_target(target)

    def compile(self, program, *, keep_weight_layout: bool = False) -> CoreAIExecutable:
        from .lower import lower_program

        if program.traced.host is not None:
            raise RlxError("random= programs are not lowered for Core AI yet")
        prog, ins, outs = lower_program(program)
        meta: Dict[str, str] = {}
        metadata.write_program(meta, ins, outs)
        metadata.write_host_parts(meta, program.traced, ins, outs)
        return CoreAIExecutable(prog, "", ins, outs, meta,
                                tempfile.TemporaryDirectory(prefix="rlxjax-coreai-"))

    def save_functions(self, functions, default: str, path) -> str:
        raise RlxError("multifunction .aimodel packages are not written yet")

    def load(self, path, backend=None, function=None):
        from .loaded import load_asset

        return load_asset(path, backend, function)

    def check_compression(self, scheme, target) -> None:
        raise ArgumentError("compress= is not implemented for format='aimodel' yet")

    def compress_leaf(self, arr, scheme):
        raise ArgumentError("compress= is not implemented for format='aimodel' yet")


FORMAT = CoreAIFormat()
