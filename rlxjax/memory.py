"""Memory analysis: what a program needs on the device (``Compiled.memory_analysis()``).

Format-neutral: a format describes its program's values (``Executable.memory_program``,
formats/base.py) as a ``ValueProgram`` - its arguments, states and constants with their
sizes, and its operations in the order the program lists them, each naming the values it
reads and the values (with their sizes) it writes, nested blocks included. ``analyse``
walks that order once and returns JAX's ``CompiledMemoryStats`` fields plus weights and
states.

The model (the reference interpreter measures the same thing while it runs,
rlxjax/coreml/interpreter/liveness.py, and the tests require both to agree):

* arguments, states and constants are held for the whole call (the caller owns them);
* a value an operation writes is allocated when the operation runs (its inputs are still
  live then) and freed after its last reader in the block that defines it (a read inside a
  nested block counts as a read by the control operation that owns the block); a value
  nothing reads is freed right after the operation that wrote it;
* a ``cond``'s branch runs on top of what is live before it, and its results then move into
  the ``cond``'s outputs; a loop's outputs are its carriers, allocated when the loop starts
  and live through every iteration (a block's inputs name them and own no bytes); an
  iteration's results are live next to the carriers until the iteration ends;
* the program's outputs, once written, stay until the call returns.

``temp_size_in_bytes`` is the peak of the live values that are neither arguments, states,
constants nor outputs; ``peak_memory_in_bytes`` is arguments + states + weights + the peak of
(outputs written so far + live temporaries).

``temp_outside_outputs_in_bytes`` counts temporaries the way XLA's ``temp_size_in_bytes``
does. XLA's is the size of its preallocated temp buffer: its buffer assignment first gives
every output its own buffer, then puts a temporary into an output buffer whose value is not
computed yet whenever it fits there (xla/service/buffer_assignment.cc ``MaybeAssignBuffer``:
size and live range; pjrt's ``CompiledMemoryStats`` adds up the allocations that are
``IsPreallocatedTempBuffer``), so only what does not fit in the outputs counts. Here: the
peak of (outputs written so far + live temporaries) - the output bytes, at least 0 - what an
allocator needs beyond the output buffers if it packs temporaries into the unwritten ones
perfectly (XLA's, placing each temporary whole into one output buffer, may need more).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Tuple


@dataclass(frozen=True)
class Op:
    """One operation: the names it reads (constants, arguments and states included), the
    values it writes with their sizes in bytes, and its nested blocks. ``loop``: the blocks
    run repeatedly with the outputs as carriers (``while_loop``), else one of them runs
    (``cond``)."""

    reads: Tuple[str, ...]
    writes: Tuple[Tuple[str, int], ...]
    blocks: Tuple["Block", ...] = ()
    loop: bool = False


@dataclass(frozen=True)
class Block:
    inputs: Tuple[str, ...]   # bound to the enclosing loop's carriers: no bytes of their own
    ops: Tuple[Op, ...]
    outputs: Tuple[str, ...]


@dataclass(frozen=True)
class ValueProgram:
    arguments: Dict[str, int]           # input name -> bytes
    states: Dict[str, int]              # state name -> bytes
    updated_states: FrozenSet[str]      # the states the program writes (in place)
    weights: int                        # bytes of every constant as the program holds it
    body: Block
    stored_weights: int = 0             # bytes of the constants as the package stores them


@dataclass(frozen=True)
class MemoryStats:
    """JAX's ``CompiledMemoryStats`` fields (bytes), plus the program's weights and states.
    ``alias_size_in_bytes``: states the program updates in place. ``weight_size_in_bytes``:
    the weights as the program computes with them, materialised when it runs (a compressed
    weight decompressed); ``weight_stored_in_bytes``: as its package stores them (the
    compressed payloads: what the weight file holds)."""

    argument_size_in_bytes: int
    output_size_in_bytes: int
    alias_size_in_bytes: int
    temp_size_in_bytes: int
    weight_size_in_bytes: int
    state_size_in_bytes: int
    peak_memory_in_bytes: int
    temp_outside_outputs_in_bytes: int = 0
    weight_stored_in_bytes: int = 0
    generated_code_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "weight_size_in_bytes", "state_size_in_bytes",
            "peak_memory_in_bytes", "temp_outside_outputs_in_bytes",
            "weight_stored_in_bytes")}

    def __str__(self) -> str:
        return ", ".join(f"{k.replace('_size_in_bytes', '').replace('_in_bytes', '')} "
                         f"{_mib(v)}" for k, v in self.as_dict().items())


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.1f} KiB"


def _defined(block: Block) -> set:
    names = set(block.inputs)
    for op in block.ops:
        names.update(n for n, _ in op.writes)
    return names


def op_reads(op: Op) -> set:
    """The names ``op`` reads, those its nested blocks read from outside them too."""
    names = set(op.reads)
    for b in op.blocks:
        names |= _free_reads(b)
    return names


def _free_reads(block: Block) -> set:
    inner = _defined(block)
    names = set(n for n in block.outputs if n not in inner)
    for op in block.ops:
        names |= op_reads(op) - inner
    return names


def block_peak(block: Block, weight: Callable[[str, int], int]) -> int:
    """The peak bytes ``block`` adds to what is live when it starts (its values weighed by
    ``weight(name, bytes)``), its outputs defined inside it included."""
    last: Dict[str, int] = {}
    uses = [op_reads(op) for op in block.ops]
    for i, u in enumerate(uses):
        for n in u:
            last[n] = i
    for n in block.outputs:
        last[n] = len(block.ops)
    sizes: Dict[str, int] = {}  # live values this block defined -> weighed bytes
    live = peak = 0
    for i, op in enumerate(block.ops):
        out = {n: weight(n, b) for n, b in op.writes}
        new = sum(out.values())
        if op.blocks:
            inner = max(block_peak(b, weight) for b in op.blocks)
            peak = max(peak, live + new + inner) if op.loop else \
                max(peak, live + inner, live + new)
        else:
            peak = max(peak, live + new)
        live += new
        sizes.update(out)
        for n in list(out) + [n for n in uses[i] if n in sizes]:
            if n in sizes and last.get(n, -1) <= i:
                live -= sizes.pop(n)
    return peak


def analyse(program: ValueProgram) -> MemoryStats:
    """The memory a call of ``program`` needs (see the module docstring)."""
    body = program.body
    produced = {n: b for op in body.ops for n, b in op.writes}
    out_names = set(body.outputs)
    outputs = sum(produced[n] if n in produced else program.arguments.get(n, 0)
                  for n in body.outputs)
    temp = block_peak(body, lambda n, b: 0 if n in out_names else b)
    everything = block_peak(body, lambda n, b: b)
    states = sum(program.states.values())
    held = sum(program.arguments.values()) + states + program.weights
    return MemoryStats(
        argument_size_in_bytes=sum(program.arguments.values()),
        output_size_in_bytes=outputs,
        alias_size_in_bytes=sum(program.states[s] for s in program.updated_states),
        temp_size_in_bytes=temp,
        weight_size_in_bytes=program.weights,
        state_size_in_bytes=states,
        peak_memory_in_bytes=held + everything,
        temp_outside_outputs_in_bytes=max(0, everything - outputs),
        weight_stored_in_bytes=program.stored_weights)
