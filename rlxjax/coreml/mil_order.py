"""Order the lowered ML Program's operations for memory: exact, only the order changes.

The lowering emits MIL ops in RLX graph order, which for a training step is the whole
forward pass and then the whole backward pass: every activation stays live until its
backward reader, and a backward op that could have consumed a large temporary early waits
behind unrelated ones. This pass re-lists the ops of every block (nested ones included) in
the best of eight orders (ten with state writes free to move): four whole-block ones,

* the order the lowering emitted;
* a greedy list schedule: of the ops whose inputs exist, the one that adds the fewest net
  bytes (its results minus the inputs it is the last reader of), earliest first on ties;
* depth-first post-orders from the block's outputs, in their order and in reverse (each
  value computed just before its first reader needs it); with state writes free to move
  (a train step's, roots like the outputs) also one from the outputs and then the writes
  reversed (the loss early, not after every update);

and each of them refined by coreml/mil_order_refine.py (groups of ops moved across its
peaks). Best is the lowest sum of two peaks (rlxjax/memory.py ``block_peak``, the model
``memory_analysis`` reports): of the live temporaries (what a runtime holding the outputs
apart from them needs) and of everything live, the outputs written so far included (what
one putting temporaries where outputs are not written yet needs, as XLA does), then the
lower second one; and neither peak may be above the emitted order's.

A block keeps its order unless another one is strictly better (then its constants move to
its top, in their order). Dependencies are the values an op reads (a control op reads what
its nested blocks read from outside them); ops with side effects (``mil.is_impure_type``)
keep their order among those acting on the same thing (one state's reads and writes; all
random draws), control ops keep theirs against every side effect, and state reads stay at
the top of the program and writes at its end (coreml/states.py says why) - except a state
whose write computes from its read (``_pinned_states``); an order that
does not keep every dependency is never taken. MIL ops are deterministic functions of their
inputs, so every result is bit for bit what it was (tests/memory/test_mil_order.py compares
the outputs of the train-step workloads, tests/memory/test_remat_order.py a checkpointed
step's). Programs with unknown dimensions (flexible inputs) keep their order.

Cost, for a block of n ops and e dependencies: the graph, the post-orders and the check of
an order O(n + e); the greedy schedule O((n + e) log n) (a heap; an op is re-pushed when a
value it reads gets down to its last reader); each peak evaluation one vectorised O(n)
pass; the refinement as coreml/mil_order_refine.py says. Two steps are O(n) per state
*pinned* at the program's ends (``_pinned_states``: read-only states, and states written
from something other than their read; a train step's are not): finding them (a search back
from each write) and making each pinned write depend on every other op. ``WORK`` counts
ops, dependencies, screening steps and evaluated orders.
"""
from __future__ import annotations

import collections
import heapq
from typing import Dict, List

from .. import memory
from ..errors import DynamicShapeError
from .memory import Reader
from .mil_order_refine import Lifetimes, refine
from .mil import RANDOM_OP_PREFIX, STATE_OP_TYPES, is_impure_type, top_blocks


#: The work of this pass since the process started, by kind: ``ops`` ordered, dependency
#: ``edges``, refine's screening steps (``screens``) and ``evaluated`` orders (each one
#: vectorised O(n) pass); tests/memory/test_order_work.py compares it on doubled depths.
WORK: collections.Counter = collections.Counter()


def order_for_memory(model) -> int:
    """Reorder every block of ``model`` in place; returns how many blocks changed."""
    changed = 0
    try:
        for top in top_blocks(model):
            changed += _order(top, set(top.outputs))
    except DynamicShapeError:  # flexible shapes: sizes unknown, the order stays
        return 0
    return changed


_WRITES = ("write_state", "coreml_update_state")


def _effect_key(op):
    """What a side effect acts on: ops with the same key keep their order (a state's reads
    and writes; every random draw, as a runtime may draw from one generator); None for a
    pure op."""
    if not is_impure_type(op.type):
        return None
    for param in ("input", "state"):
        arg = op.inputs.get(param)
        if op.type in STATE_OP_TYPES and arg is not None and arg.arguments:
            return "state:" + arg.arguments[0].name
    return "random" if op.type.startswith(RANDOM_OP_PREFIX) else op.type


def _pinned_states(ops, uses, producer) -> set:
    """The states whose reads stay at the top and writes at the end (coreml/states.py): all
    but those whose every write computes from what the state's read gave (a data
    dependency no runtime can reorder), which move like any op - a train step's chunk
    states (states/mlstate.py) are read when first needed and written once encoded."""
    reads: Dict[str, int] = {}
    free, pinned = set(), set()
    for j, op in enumerate(ops):
        key = _effect_key(op)
        if op.type == "read_state":
            reads.setdefault(key, j)
        elif op.type in _WRITES:
            r = reads.get(key)
            (free if r is not None and _reaches(j, r, uses, producer) else pinned).add(key)
    return (set(reads) - free) | pinned   # (read-only states stay pinned, as before)


def _reaches(j: int, target: int, uses, producer) -> bool:
    """Whether op ``j`` reads, through any chain of values, a result of op ``target``."""
    seen, todo = {j}, [j]
    while todo:
        for n in uses[todo.pop()]:
            i = producer.get(n)
            if i == target:
                return True
            if i is not None and i > target and i not in seen:
                seen.add(i)
                todo.append(i)
    return False


def _is_const(op) -> bool:
    return op.type == "const" or op.type.startswith("constexpr_")


def _order(block, keep) -> int:
    changed = 0
    for op in block.operations:
        for sub in op.blocks:
            changed += _order(sub, set(sub.outputs))
    ops = [op for op in block.operations if not _is_const(op)]
    if len(ops) < 3:
        return changed
    mem, uses, deps, producer, free_writes = _graph(ops)
    outputs = tuple(block.outputs)
    lifetimes = Lifetimes(mem, uses, deps, keep, outputs)

    def peak(order):
        """(peak of the temporaries + peak of everything live, the latter): both count,
        the first for a runtime holding the outputs apart from the temporaries, the
        second (the outputs written so far included) for one putting temporaries where
        outputs are not written yet (XLA's way)."""
        return lifetimes.score(order)[:2]

    original = list(range(len(ops)))
    best, best_peak = original, peak(original)
    emitted = best_peak[0] - best_peak[1], best_peak[1]
    candidates = [original, _greedy(mem, uses, deps, producer, outputs),
                  _post_order(deps, producer, outputs, free_writes),
                  _post_order(deps, producer, outputs, free_writes, reverse_roots=True)]
    if free_writes:  # the outputs (a train step's loss) first, the states' writes reversed
        candidates.append(_post_order(deps, producer, outputs, free_writes[::-1]))
    for candidate in candidates:
        for order in (candidate, refine(lifetimes, candidate)):
            p = peak(order)
            # neither peak above the emitted order's, and the program's dependencies kept
            if p < best_peak and p[0] - p[1] <= emitted[0] and p[1] <= emitted[1] \
                    and _respects(order, deps):
                best, best_peak = order, p
    WORK.update(ops=len(ops), edges=sum(map(len, deps)), screens=lifetimes.work,
                evaluated=lifetimes.evaluated)
    if best is original:
        return changed
    consts = [op for op in block.operations if _is_const(op)]
    new = consts + [ops[j] for j in best]
    copies = [type(op)() for op in new]
    for c, op in zip(copies, new):
        c.CopyFrom(op)
    del block.operations[:]
    block.operations.extend(copies)
    return changed + 1


def _graph(ops):
    """The ops' memory descriptions, the names each reads, the ops each depends on (the
    values it reads, side effects in their order) and the op writing each value."""
    reader = Reader()
    mem = [reader.describe(op) for op in ops]
    uses = [sorted(memory.op_reads(m)) for m in mem]
    producer = {n: j for j, m in enumerate(mem) for n, _ in m.writes}
    deps: List[List[int]] = []
    last: Dict[str, int] = {}  # side-effect key -> the latest op with it
    barrier = None  # the latest control op (its blocks may have side effects)
    last_read = None
    pinned = _pinned_states(ops, uses, producer)
    for j, op in enumerate(ops):
        d = {producer[n] for n in uses[j] if n in producer}
        key = _effect_key(op)
        if op.type == "read_state" and key in pinned:
            if last_read is not None:
                d.add(last_read)
            last_read = j
        elif last_read is not None:  # reads stay before everything (coreml/states.py)
            d.add(last_read)
        if op.blocks:
            d.update(last.values())
            if barrier is not None:
                d.add(barrier)
            barrier, last = j, {}
        elif key is not None:
            if key in last:
                d.add(last[key])
            if barrier is not None:
                d.add(barrier)
            last[key] = j
        deps.append(d)
    writes = [j for j, op in enumerate(ops) if op.type in _WRITES
              and _effect_key(op) in pinned]
    if writes:  # writes stay after everything (coreml/states.py)
        others = [j for j in range(len(ops)) if ops[j].type not in _WRITES]
        for w in writes:
            deps[w].update(others)
    # state writes free to move (``_pinned_states``) are roots like the outputs: each is
    # written as soon as what it writes exists
    free_writes = [j for j, op in enumerate(ops) if op.type in _WRITES and j not in writes]
    deps = [sorted(d) for d in deps]
    return mem, uses, deps, producer, free_writes


def _respects(order, deps) -> bool:
    """Whether ``order`` lists every op once, after the ops it depends on."""
    pos = {j: k for k, j in enumerate(order)}
    return len(pos) == len(deps) == len(order) and all(
        pos[i] < pos[j] for j, d in enumerate(deps) for i in d)


def _greedy(mem, uses, deps, producer, outputs) -> List[int]:
    n = len(mem)
    readers: Dict[str, List[int]] = {}
    for j, u in enumerate(uses):
        for name in u:
            if name in producer:
                readers.setdefault(name, []).append(j)
    remaining = {name: len(r) for name, r in readers.items()}
    held = set(outputs)
    size = {name: b for m in mem for name, b in m.writes}
    users: List[List[int]] = [[] for _ in range(n)]
    indeg = [len(d) for d in deps]
    for j, d in enumerate(deps):
        for i in d:
            users[i].append(j)
    done = [False] * n

    def delta(j):
        add = sum(b for name, b in mem[j].writes if name in remaining or name in held)
        free = sum(size[name] for name in uses[j]
                   if remaining.get(name) == 1 and name not in held)
        return add - free

    heap = [(delta(j), j) for j in range(n) if indeg[j] == 0]
    heapq.heapify(heap)
    current = {j: p for p, j in heap}
    order = []
    while heap:
        p, j = heapq.heappop(heap)
        if done[j] or current.get(j) != p:
            continue
        done[j] = True
        order.append(j)
        for name in uses[j]:
            if name in remaining:
                remaining[name] -= 1
                if remaining[name] == 1:  # its last reader now frees it
                    for k in readers[name]:
                        if not done[k] and indeg[k] == 0:
                            current[k] = delta(k)
                            heapq.heappush(heap, (current[k], k))
        for k in users[j]:
            indeg[k] -= 1
            if indeg[k] == 0:
                current[k] = delta(k)
                heapq.heappush(heap, (current[k], k))
    if len(order) != n:  # cannot happen for an SSA block: keep the program as it is
        return list(range(n))
    return order


def _post_order(deps, producer, outputs, first=(), reverse_roots=False) -> List[int]:
    n = len(deps)
    seen = [False] * n
    order: List[int] = []
    roots = [producer[name] for name in outputs if name in producer] + list(first)
    roots = (roots[::-1] if reverse_roots else roots) + list(range(n))
    for root in roots:
        if seen[root]:
            continue
        stack = [(root, 0)]
        seen[root] = True
        while stack:
            j, k = stack.pop()
            if k < len(deps[j]):
                stack.append((j, k + 1))
                i = deps[j][k]
                if not seen[i]:
                    seen[i] = True
                    stack.append((i, 0))
            else:
                order.append(j)
    return order
