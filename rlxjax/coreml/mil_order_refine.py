"""Lower an op order's peaks by moving groups of ops across them (the memory order's last step).

coreml/mil_order.py picks the best of a few whole-block orders; each has its own bad spots.
A train step's worst is at its end: the optimizer update of a big parameter (a tied
embedding, whose gradient is complete only when the backward pass is) holds a few
elementwise temporaries of its size while every other new parameter and optimizer state is
already written, so no unwritten output is left to hold them (the peak of everything live;
``temp_outside_outputs_in_bytes`` counts it as XLA counts its temp). With per-block
``jax.checkpoint`` the candidate orders all landed there (issue 27: 286.6 MiB on GPT-2
small against 6.0 without the checkpoint). ``refine`` repairs an order locally, as long as
that helps:

* find the peak, of everything live and of the temporaries in turn (rlxjax/memory.py's
  model: a value is live from the op writing it to its last reader, an output to the end);
* for the values live there, biggest first, try three moves: *sink* the op writing the
  value, with the ops only it depends on (its cone, up to ``_CONE`` ops: an update chain
  and the weight-gradient matmul it starts from; a state's read and decode, the read's
  next read or write of the state only coming after it), to just before the first op
  needing any of them after the peak
  - once with the cone stopping at ops that write outputs (they stay live anyway: the
  update's tail waits, its new parameter not written yet), once through them; *hoist* the
  value's last reader, with what it needs after the peak, to just before the peak (a
  temporary consumed before the peak instead of after it). A move is evaluated only when
  what it frees at the peak outweighs what it keeps live across it;
* a move is kept when it lowers the score: the sum of the two peaks, then the peak of
  everything, then the number of ops at the peaks (a flat peak goes down one op at a time).
  The score falls with every kept move, so the loop ends; it stops when no move helps,
  after ``budget`` evaluated orders, or after a long search found a step of under 1e-4 of
  the score (the last bytes at a program's very end).

Cost, for a block of n ops (a train step: L layers, n ~ L): a screen visits at most
``_CONE`` ops and their dependencies, and a screen that found no move is not repeated while
the peak op and the ops it looked at stay where they are (``_Memo``: its verdict cannot
change then), so the screening work (``Lifetimes.work`` counts it) grows with the moves made
and the ops they touch, not with moves x live values as it did (a 30-layer model's refine
re-screened the same ~700 live values after each of its ~240 moves: 21.9 s of a 31.8 s
compile). Each evaluated order is one vectorised O(n) pass (numpy) and each kept move one
O(live) vectorised look-up of the memo; at most ``budget`` orders are evaluated. A train
step's refine keeps O(L) moves, so these two O(n)-per-move terms are O(n^2) element
operations in numpy (~1 ms per move at n = 5,000), the screening O(n) in Python;
tests/memory/test_order_work.py bounds both counts on a doubled depth. The memo changes no
order: the moves found and kept are the ones the plain search finds.

Moves keep every dependency (a value's readers, side effects' order: the ``deps`` of
coreml/mil_order.py), so the result is an order of the same ops and every value bit for bit
what it was. The curves are computed with numpy from each value's first and last position
(one pass per evaluated order) and give the peaks ``memory.block_peak`` gives (an op with
nested blocks adds their peak where it runs); tests/memory/test_remat_order.py checks both
on random programs.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Set

import numpy as np

from .. import memory

_KEYS = ("all", "temp")  # the peak of everything live; of the temporaries (outputs weigh 0)
_CONE = 160  # at most this many ops move at once (a state's read and decode: ~80)
_TINY = 1e-4  # a step lowering the sum of the peaks by less than this is tiny
_PATIENCE = 32  # evaluations since the last kept move that make a search long


class Lifetimes:
    """The values of one block's ops (``mem``: ``memory.Op`` each), their sizes, writers and
    readers; ``state(order)`` gives their live ranges and the two live-bytes curves."""

    def __init__(self, mem: Sequence[memory.Op], uses, deps, keep, outputs):
        n = self.n = len(mem)
        index: Dict[str, int] = {}
        prod, size_all, size_temp = [], [], []
        for j, m in enumerate(mem):
            for name, b in m.writes:
                index[name] = len(prod)
                prod.append(j)
                size_all.append(b)
                size_temp.append(0 if name in keep else b)
        self.prod = np.array(prod, dtype=np.int64)
        # float64 holds byte counts (sums < 2**53) exactly and bincount wants it
        self.size = {"all": np.array(size_all, dtype=np.float64),
                     "temp": np.array(size_temp, dtype=np.float64)}
        self.readers: List[List[int]] = [[] for _ in prod]
        self.reads: List[List[int]] = [[] for _ in range(n)]  # values of this block op j reads
        for i, u in enumerate(uses):
            for name in u:
                v = index.get(name)
                if v is not None:
                    self.readers[v].append(i)
                    self.reads[i].append(v)
        self.writes = [[index[name] for name, _ in m.writes] for m in mem]
        self.is_out = np.zeros(len(prod), dtype=bool)
        self.is_out[[index[o] for o in outputs if o in index]] = True
        self.writes_output = [any(self.is_out[w] for w in ws) for ws in self.writes]
        self.read = np.array([bool(r) for r in self.readers], dtype=bool)
        flat = [i for r in self.readers for i in r]
        self.flat = np.array(flat, dtype=np.int64)
        self.offsets = np.cumsum([0] + [len(r) for r in self.readers if r])[:-1].astype(np.int64)
        self.deps = deps
        self.users: List[List[int]] = [[] for _ in range(n)]
        for j, d in enumerate(deps):
            for i in d:
                self.users[i].append(j)
        # the users reading a value of the op (the others only come after it: a side
        # effect's order, a state's next read or write)
        self.data_users = [{u for w in ws for u in self.readers[w]} for ws in self.writes]
        # an op with nested blocks adds their peak on top of what is live at it
        # (memory.block_peak: a loop's body on top of its carriers, a branch beside them)
        self.extra = {k: np.zeros(n) for k in _KEYS}
        for j, m in enumerate(mem):
            if m.blocks:
                for key in _KEYS:
                    w = (lambda nm, b: b) if key == "all" else \
                        (lambda nm, b: 0 if nm in keep else b)
                    inner = max(memory.block_peak(b, w) for b in m.blocks)
                    new = sum(w(nm, b) for nm, b in m.writes)
                    self.extra[key][j] = inner if m.loop else max(0, inner - new)
        self.evaluated = 0
        self.work = 0  # candidates screened and ops visited (tests/memory count it)
        self.cones: Dict[tuple, tuple] = {}
        self.sink_support: Dict[tuple, set] = {}
        self.one_cone = np.zeros(n, dtype=bool)  # known: j's cone has no output in it
        # the same as lists, for the loops of ``_hoist``
        self.is_out_l, self.prod_l = self.is_out.tolist(), self.prod.tolist()
        self.size_l = {id(a): a.tolist() for a in self.size.values()}
        # ``state``'s one bincount: each value's size at its birth and minus it after its
        # death, for both curves (the second shifted by n + 2)
        self.weights = np.concatenate([x for k in _KEYS for x in (self.size[k], -self.size[k])])
        self.has_extra = any(e.any() for e in self.extra.values())

    def state(self, order: np.ndarray):
        """(position of each op, first and last position of each value, the two curves,
        the score: (the sum of their peaks, the peak of everything, the ops at the
        peaks))."""
        self.evaluated += 1
        n = self.n
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        birth = pos[self.prod]
        death = birth.copy()  # a value nothing reads dies where it is made
        if len(self.flat):
            death[self.read] = np.maximum.reduceat(pos[self.flat], self.offsets)
        death[self.is_out] = n  # outputs stay
        # both curves from one bincount (rows: _KEYS); byte counts are whole numbers below
        # 2**53, so the float64 sums are exact in any order
        m = n + 2
        at = np.concatenate([birth, death + 1, birth + m, death + (m + 1)])
        c = np.cumsum(np.bincount(at, weights=self.weights, minlength=2 * m)
                      .reshape(2, m)[:, :n], axis=1)
        if self.has_extra:
            c += np.stack([self.extra[k][order] for k in _KEYS])
        top = c.max(axis=1)
        at_top = int((c >= top[:, None]).sum())
        curves = dict(zip(_KEYS, c))
        score = (top[0] + top[1], top[0], at_top)
        return pos, birth, death, curves, score, []

    def score(self, order) -> tuple:
        """(peak of the temporaries + peak of everything live, the latter, the ops at the
        peaks) of ``order``: the peaks ``memory.block_peak`` gives for it."""
        return self.state(np.asarray(order, dtype=np.int64))[4]


def _cone(lt: Lifetimes, j: int, outputs: bool):
    """``j`` and the ops only it (through each other) depends on; without ops writing an
    output unless ``outputs`` (an output stays live anyway: the ops after it move alone).
    Returns (the ops, the ops outside reading their values, the values they write, the
    values from outside they read, the ops again), numpy arrays but the first; the graph
    decides, so each is computed once, and a cone with no output in it is one object for
    both ``outputs``."""
    got = lt.cones.get((j, outputs))
    if got is None:
        plain = _cone(lt, j, False) if outputs else None
        cone = {j}
        stack = list(lt.deps[j])
        while stack and len(cone) < _CONE:
            i = stack.pop()
            if i not in cone and all(u in cone for u in lt.data_users[i]) and (
                    outputs or not lt.writes_output[i]):
                cone.add(i)
                stack.extend(lt.deps[i])
        arr = lambda xs: np.array(sorted(xs), dtype=np.int64)  # noqa: E731
        got = (cone, arr({u for c in cone for u in lt.users[c]} - cone),
               arr({w for c in cone for w in lt.writes[c]}),
               arr({u for c in cone for u in lt.reads[c] if lt.prod[u] not in cone}))
        got = got + (arr(cone),)
        if plain is not None and plain[0] == cone:
            got = plain  # no output in it: the same move
        lt.cones[(j, outputs)] = got
    return got


def _move(order: np.ndarray, group: Set[int], before) -> np.ndarray:
    """``order`` with the ops of ``group`` (in their order) just before op ``before``
    (None: at the end)."""
    inside = np.zeros(len(order), dtype=bool)
    inside[list(group)] = True
    sel = inside[order]
    moved, rest = order[sel], order[~sel]
    if before is None:
        return np.concatenate([rest, moved])
    k = int(np.flatnonzero(rest == before)[0])
    return np.concatenate([rest[:k], moved, rest[k:]])


class _Memo:
    """The screens of one curve's peak op that found no move, while nothing they looked at
    moves.

    A screen compares positions with the peak's only through the peak op (before it, it,
    after it) and reads the liveness there of the values its ops write and read; moving a
    group of ops changes neither for ops outside the group. So a screen's "no move" holds
    until an op it looked at (its ``support``: the ops it visited, the writers and readers
    of the values it weighed) or the peak op moves; ``moved`` forgets those. The moves
    found are the ones the screens would find again. One memo per curve and peak op (the
    peak goes back and forth between a few ops)."""

    def __init__(self, n: int, peak: int):
        self.peak = peak
        self.failed = {kind: np.zeros(n, dtype=bool) for kind in ("s0", "s1", "h")}
        self.watch: Dict[int, List[tuple]] = {}

    def note(self, kind: str, op: int, support) -> None:
        self.failed[kind][op] = True
        entry, watch = (kind, op), self.watch
        for x in support:
            got = watch.get(x)
            if got is None:
                watch[x] = [entry]
            else:
                got.append(entry)

    def moved(self, group) -> bool:
        """Forget what ``group`` moving may change; False if the peak op moved."""
        if self.peak in group:
            return False
        for x in group:
            for kind, op in self.watch.pop(x, ()):
                self.failed[kind][op] = False
        return True


def _around(lt, ops, values):
    """The ops whose places decide what a screen of ``ops`` found: them, and the writers
    and readers of ``values``."""
    out = set(ops)
    for u in values:
        out.add(int(lt.prod[u]))
        out.update(lt.readers[u])
    return out


def _sink(lt, st, t, live, size, j, outputs):
    """The move of ``j``'s cone past position ``t`` if it may lower the curve there: (the
    move: the group, the op it goes before; None), else (None, the ops whose places decided
    it: the users after the cone when one comes first, none when the peak op is in it, else
    the cone, its users and the writers and readers of the values it reads)."""
    pos, birth, _, _, _, _ = st
    group, after, writes, reads, members = _cone(lt, j, outputs)
    lt.work += 1
    first = int(after[np.argmin(pos[after])]) if len(after) else None
    if first is not None and pos[first] <= t:
        return None, _support(lt, (j, outputs, "after"), lambda: after.tolist())
    if (pos[members] == t).any():
        return None, ()
    gain = size[writes][live[writes]].sum()
    held = reads[~live[reads] & (birth[reads] <= t)]
    if size[held].sum() >= gain:
        return None, _support(lt, (j, outputs, "all"), lambda: _around(
            lt, group.union(after.tolist()), reads.tolist()))
    return (group, first), None


def _support(lt, key, make):
    """A sink screen's support (it depends on the graph only), made once."""
    got = lt.sink_support.get(key)
    if got is None:
        got = lt.sink_support[key] = [int(x) for x in make()]
    return got


def _hoist(lt, st, t, live, size, v, order):
    """The move of value ``v``'s last reader (and what it needs after ``t``) to just before
    position ``t`` if it may lower the curve there: (the move, None), else (None, the ops it
    looked at). Visits at most ``_CONE`` ops (and their dependencies). (Python lists, not
    numpy scalars, in its loops: the same numbers, a few times faster.)"""
    death = st[2]
    posl = _listed(st)
    k = int(order[int(death[v])])
    group = {k}
    stack = list(lt.deps[k])
    seen = [k]
    deps = lt.deps
    while stack:
        i = stack.pop()
        seen.append(i)
        if i in group or posl[i] < t:
            continue
        if posl[i] == t or len(group) >= _CONE:
            lt.work += len(seen)
            return None, seen
        group.add(i)
        stack.extend(deps[i])
    lt.work += len(seen)
    is_out, readers, prod, sizes = lt.is_out_l, lt.readers, lt.prod_l, lt.size_l[id(size)]
    cost = sum(sizes[w] for a in group for w in lt.writes[a]
               if is_out[w] or any(r not in group for r in readers[w]))
    reads = {u for a in group for u in lt.reads[a]}
    gain = sum(sizes[u] for u in reads
               if live[u] and not is_out[u] and prod[u] not in group
               and all(r in group or posl[r] < t for r in readers[u]))
    if cost >= gain:
        return None, _around(lt, seen, reads)
    return (group, int(order[t])), None


def _listed(st):
    """The positions of ``st`` as a list (cheap to index one at a time), made once."""
    got = st[5]
    if not got:
        got.append(st[0].tolist())
    return got[0]


def _moves(lt, st, key, order, memos: Dict[tuple, _Memo]):
    """The moves that may lower the ``key`` curve at its peak, for the values live there,
    biggest first (ties: the lower value first); the screens the memo of the peak knows to
    find nothing are skipped (one vectorised pass), those finding nothing are noted in it."""
    _, birth, death, curves, _, _ = st
    size = lt.size[key]
    t = int(np.argmax(curves[key]))
    peak = int(order[t])
    memo = memos.get((key, peak))
    if memo is None:
        memo = memos[(key, peak)] = _Memo(lt.n, peak)
    live = (birth <= t) & (death >= t) & (size > 0)
    cands = np.flatnonzero(live)
    cands = cands[np.lexsort((cands, -size[cands]))]
    prod, d = lt.prod[cands], death[cands]
    hoistable = (t < d) & (d < lt.n)
    f = memo.failed
    todo = ~f["s0"][prod] | ~(f["s1"][prod] | lt.one_cone[prod]) | \
        (hoistable & ~f["h"][order[np.minimum(d, lt.n - 1)]])
    sunk: Set[int] = set()
    hoisted: Set[int] = set()
    for v in cands[todo].tolist():
        j = int(lt.prod[v])
        if j not in sunk:
            sunk.add(j)
            for outputs, kind in ((False, "s0"), (True, "s1")):
                if outputs and _cone(lt, j, True) is _cone(lt, j, False):
                    lt.one_cone[j] = True
                    break
                if not f[kind][j]:
                    move, support = _sink(lt, st, t, live, size, j, outputs)
                    if move is None:
                        memo.note(kind, j, support)
                    yield move
        dv = int(death[v])
        if t < dv < lt.n and dv not in hoisted:
            hoisted.add(dv)
            k = int(order[dv])
            if not f["h"][k]:
                move, support = _hoist(lt, st, t, live, size, v, order)
                if move is None:
                    memo.note("h", k, support)
                yield move


def refine(lt: Lifetimes, order: Sequence[int], budget: int = 2000) -> List[int]:
    """``order`` with its peaks lowered by sink / hoist moves (module docstring); at most
    ``budget`` orders are evaluated."""
    order = np.asarray(order, dtype=np.int64)
    st = lt.state(order)
    start = lt.evaluated
    keys = _KEYS
    memos: Dict[tuple, _Memo] = {}  # per curve and peak op
    while lt.evaluated - start < budget:
        kept = None
        searched = lt.evaluated
        for key in keys:
            for move in _moves(lt, st, key, order, memos):
                if move is None:
                    continue
                if lt.evaluated - start >= budget:
                    break
                new = _move(order, *move)
                ns = lt.state(new)
                if ns[4] < st[4]:
                    kept = new, ns, move[0]
                    break
            if kept:
                break
        if kept is None:
            break
        tiny = kept[1][4][0] > st[4][0] * (1 - _TINY)
        order, st, group = kept
        for key in list(memos):
            if not memos[key].moved(group):
                del memos[key]
        if tiny and lt.evaluated - searched > _PATIENCE:
            break  # a long search for a step of a few bytes: the rest is not worth it
        keys = keys[::-1]  # attack the other peak next
    return [int(j) for j in order]
