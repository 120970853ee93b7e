"""The accelerated reference path: backend ``"reference-fast"``, an explicit option.

``AcceleratedProgram`` loads a program exactly as the oracle (``ReferenceProgram``) does and
runs the same numpy arithmetic with less Python around it:

* ops that ``prepared.py`` covers (elementwise, reductions, matmul, reshape, transpose, slices,
  pad, cast, select, for the declared input types that make the general checks redundant)
  run a prepared call with their constant parameters decoded once;
* once every op of a program without nested blocks has run and been checked, the whole
  program runs as one generated straight-line function (``codegen.py``).

Feeds, states, output checks on first execution and error messages are the oracle's own (this
class only overrides how an op is called and how the function's block runs). Results must be
bit-identical to the oracle's: tests/coreml/interpreter/test_accelerated_equivalence.py runs a corpus of
programs on both, and ``RLXJAX_TEST_BACKEND=reference-fast`` runs the whole suite on this path.
Training loops that want speed opt in with ``backend="reference-fast"``; the tests that compare
with JAX use the oracle.
"""
from __future__ import annotations

from functools import partial

from ..interpreter import ReferenceProgram, ReferenceRuntimeError, walk_ops
from .codegen import straight_line
from .prepared import prepare_call


class AcceleratedProgram(ReferenceProgram):
    def __init__(self, model, weights_dir=None, *, function="main"):
        super().__init__(model, weights_dir, function=function)
        #: Op -> run(env) -> outputs: a PreparedCall's runner, else the oracle's call
        self._runners = {}
        self._prepared = {}  # Op -> PreparedCall, for the ops prepared.py covers
        for op in walk_ops(self.body):
            call = prepare_call(op, self.signatures, self.constants)
            if call is not None:
                self._prepared[op] = call
                self._runners[op] = call.runner()
            else:
                self._runners[op] = partial(ReferenceProgram._call, self, op)
        # The generated function (made once every op is checked), or False where the loop
        # stays: nested blocks, or outputs checked on every run (unknown input dims).
        loop_only = self.check_always or any(op.blocks for op in self.body.ops)
        self._straight = False if loop_only else None

    @property
    def n_prepared_ops(self) -> int:
        """How many ops run a prepared call instead of their general implementation."""
        return len(self._prepared)

    def _call(self, op, env) -> tuple:
        return self._runners[op](env)

    def _run_function(self, env) -> list:
        if self._straight is None and not any(op.unchecked for op in self.body.ops):
            self._straight = self._straight_line()
        if self._straight:
            return self._straight(env)
        return super()._run_function(env)

    def _straight_line(self):
        """The generated function for every later run."""
        steps = [(op, self._prepared.get(op) or self._runners[op]) for op in self.body.ops]
        return straight_line(steps, self.output_names, self.op_error, ReferenceRuntimeError)
