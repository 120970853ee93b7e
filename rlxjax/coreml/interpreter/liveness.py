"""The reference interpreter counting live bytes as it runs: the measurement that
``Compiled.memory_analysis()`` (rlxjax/memory.py) is checked against.

``LiveBytesProgram`` runs a program exactly as ``ReferenceProgram`` does and, along the
way, frees each value after its last reader (found on the decoded ops of each block, a read
inside a nested block counting as a read by the op that owns the block) and adds up the
``nbytes`` of the arrays it holds: every op's results when it returns, a loop's carriers
(its initial values' arrays) while it runs, a branch's values while it runs. Arguments,
states and constants are the caller's and are not counted; the program's outputs are
counted (``peak_bytes``) but are not temporaries (``peak_temp_bytes``).
"""
from __future__ import annotations

from .interpreter import LIST, NAME, ReferenceProgram


def _reads(op) -> set:
    names = set()
    for _, kind, payload in op.inputs:
        if kind == NAME:
            names.add(payload)
        elif kind == LIST:
            names.update(p for k, p in payload if k == NAME)
    for blk in op.blocks or ():
        names |= _outer_reads(blk)
    return names


def _outer_reads(blk) -> set:
    inner = set(blk.inputs)
    for op in blk.ops:
        inner.update(op.outputs)
    names = {n for n in blk.outputs if n not in inner}
    for op in blk.ops:
        names |= _reads(op) - inner
    return names


class LiveBytesProgram(ReferenceProgram):
    """A ``ReferenceProgram`` whose ``measure(feeds, state=None)`` runs the program and
    returns its outputs and ``{"peak_bytes", "peak_temp_bytes"}``."""

    _measuring = False

    def measure(self, feeds: dict, state=None):
        self._last_uses = {}
        self._live = self._live_temp = self._peak = self._peak_temp = 0
        self._outputs = set(self.output_names)
        self._carried = None
        self._measuring = True
        try:
            results = self.run(feeds, state=state)
        finally:
            self._measuring = False
        return results, {"peak_bytes": self._peak, "peak_temp_bytes": self._peak_temp}

    def _add(self, name, nbytes):
        self._live += nbytes
        self._peak = max(self._peak, self._live)
        if name not in self._outputs:
            self._live_temp += nbytes
            self._peak_temp = max(self._peak_temp, self._live_temp)

    def _free(self, name, nbytes):
        self._live -= nbytes
        if name not in self._outputs:
            self._live_temp -= nbytes

    def _last_use(self, block) -> dict:
        last = self._last_uses.get(id(block))
        if last is None:
            last = {}
            for i, op in enumerate(block.ops):
                for n in _reads(op):
                    last[n] = i
            for n in block.outputs:
                last[n] = len(block.ops)
            self._last_uses[id(block)] = last
        return last

    def _run_block(self, block, env, values=()):
        if not self._measuring:  # a plain run(): no counting
            return super()._run_block(block, env, values)
        last = self._last_use(block)
        for name, v in zip(block.inputs, values):
            env[name] = v  # a loop's carriers: counted by the loop
        held = {}  # values this block made -> bytes
        for i, op in enumerate(block.ops):
            self._carried = None
            results = self._execute(op, env)
            carried, self._carried = self._carried, None
            for k, (name, value) in enumerate(zip(op.outputs, results)):
                env[name] = value
                if carried is None:
                    nbytes = getattr(value, "nbytes", 0)
                    self._add(name, nbytes)
                else:  # a loop's outputs are its carriers, counted when it started
                    nbytes = carried[k]
                held[name] = nbytes
            for name in list(op.outputs) + sorted(_reads(op)):
                if name in held and last.get(name, -1) <= i:
                    self._free(name, held.pop(name))
        out = [env[n] for n in block.outputs]
        for name, nbytes in held.items():  # this block's outputs move into its owner's
            self._free(name, nbytes)
        return out

    def _while_loop(self, op, inputs, env):
        if not self._measuring:
            return super()._while_loop(op, inputs, env)
        sizes = [getattr(v, "nbytes", 0) for v in inputs["loop_vars"]]
        for name, nbytes in zip(op.outputs, sizes):
            self._add(name, nbytes)
        values = super()._while_loop(op, inputs, env)
        self._carried = sizes
        return values
