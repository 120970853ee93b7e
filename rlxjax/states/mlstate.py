"""``state="mlstate"`` training steps: parameters and optimizer state in a format's states.

How the leaves are stored is the format's ``Codec`` (``CODECS``, chosen by its registry
entry's ``state_codec``): Core AI's states are fp32 / int32 and hold the values as they are
(``Plain``); Core ML's are fp16, and the rest of this docstring is about them (``F16x3``).

Core ML states are fp16 tensors, and two fp16 values cannot hold every fp32 value (there are
fewer finite fp16 pairs than finite fp32 values), while a plain hi/lo pair
(hi = fp16(x), lo = fp16(x - hi)) also inherits fp16's range: Adam's second moments
(~grad^2, often < 6e-8) underflow to zero and the update blows up. So each fp32 value is
stored *exactly* in three fp16 states, all holding small integers that fp16 represents
exactly (|v| <= 2048):

* ``exp``: sign(x) * (e + 192) where x = m * 2^e, m in [1, 2); ±0 for x = ±0
* ``hi``, ``lo``: the 23 fraction bits of m as F = hi * 4096 + lo, hi in [0, 2048],
  lo in [-2048, 2047] (signed digits, so each fits fp16 exactly)

Encoding estimates e as floor(log2 |x|) and settles it with exact comparisons and
multiplications by powers of two (looked up in a table, as decoding looks up 2^e), so every
finite fp32 value - subnormals and -0.0 included - round-trips bit for bit whenever the
runtime's log is within 1 of log2 |x|; a NaN stays NaN, an infinity comes back as NaN.
Inside the program the maths stays fp32:
an mlstate step computes exactly what the ``io`` step compiled for the same target computes
(states need iOS18; io defaults to iOS17, whose attention is matmul + softmax, not iOS18's
fused scaled_dot_product_attention: tests/training/test_train_mlstate.py). int32 leaves (optax's step
count) are split into three base-2048 digits (truncating division), exact over the whole
int32 range. All fp32 leaves are packed into one flat vector (one set of three states), the
int32 leaves into another; the codec runs on chunks of that vector (``CHUNK``: every leaf of a
small model is in one chunk), so its temporaries are a chunk's size and it costs ~40
ops per chunk to encode and ~15 to decode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ArgumentError
from .mlstate_codec import (CODECS, F16, F32_PIECES, I32_PIECES, Codec,  # noqa: F401
                            F16x3, Plain, decode_f32, decode_i32, encode_f32, encode_i32)
from .mlstate_np import (BIAS, I32_BASE, decode_f32_np, decode_i32_np,  # noqa: F401
                         encode_f32_np, encode_i32_np)  # (the host codec)

_TAGS = (("float32", "f32"), ("int32", "i32"))


# -- layout: where each leaf lives -------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    name: str       # pytree path name ('params.Dense_0.kernel', 'opt_state.0.count')
    role: str       # 'param' | 'opt_state'
    dtype: str      # 'float32' | 'int32'
    shape: Tuple[int, ...]
    offset: int     # into the packed vector of its dtype
    size: int


@dataclass(frozen=True)
class Layout:
    slots: Tuple[Slot, ...]
    n_params: int
    codec: Codec = CODECS["f16x3"]
    prefix: str = "state"   # graph names of the states: '<prefix>.f32.exp', ...
    #: None: one set of states per dtype (the whole packed vector). A number: a dtype whose
    #: packed vector is longer has one set of states per codec chunk of at most this many
    #: elements ('<prefix>.f32.<k>.exp', ...), so a step can read, decode, update, encode and
    #: write each chunk on its own (its temporaries a chunk's size, not the model's).
    chunk: Optional[int] = None
    #: one set of states per leaf (``chunks``): a codec that stores the values as they are
    #: (Core AI's ``plain``) then reads and writes each leaf's own state, with no packed
    #: vector to concatenate and slice on every step (which cost a Core AI MLP step 88 % of
    #: its time: bench/coreai_speed.py)
    per_leaf: bool = False

    def group(self, dtype: str) -> List[Slot]:
        return [s for s in self.slots if s.dtype == dtype]

    def length(self, dtype: str) -> int:
        return sum(s.size for s in self.group(dtype))

    def state_sets(self, dtype: str) -> List[Tuple[List[str], int, int]]:
        """(graph names of the pieces, first, end element of the packed vector) of each set
        of states of ``dtype``, in order."""
        n = self.length(dtype)
        if not n:
            return []
        tag = dict(_TAGS)[dtype]
        pieces = self.codec.pieces(dtype)
        if not self.per_leaf and (self.chunk is None or n <= self.chunk):
            return [([f"{self.prefix}.{tag}.{p}" for p in pieces], 0, n)]
        return [([f"{self.prefix}.{tag}.{k}.{p}" for p in pieces], lo, hi)
                for k, (lo, hi) in enumerate(_bounds(c) for c in chunks(self, dtype))]

    @property
    def chunked(self) -> bool:
        """Whether some dtype's states are cut into chunks."""
        return any(len(self.state_sets(dt)) > 1 for dt, _ in _TAGS)

    def states(self) -> List[Tuple[str, str, int]]:
        """(graph input name, role, length) of every state."""
        return [(name, role, n) for name, role, n, _ in self.state_types()]

    def state_types(self) -> List[Tuple[str, str, int, str]]:
        """(graph input name, role, length, numpy dtype name) of every state."""
        return [(name, role, n, dt) for name, role, n, dt, _ in self.state_rows()]

    def state_rows(self) -> List[Tuple[str, str, int, str, int]]:
        """(graph input name, role, length, numpy dtype name, offset into the packed vector
        of its dtype) of every state."""
        out = []
        for dtype, tag in _TAGS:
            for names, lo, hi in self.state_sets(dtype):
                out += [(name, f"{tag}_{p}", hi - lo, self.codec.piece_dtype(dtype), lo)
                        for name, p in zip(names, self.codec.pieces(dtype))]
        return out

    def state_shapes(self) -> List[Tuple[int, ...]]:
        """The shape of every state (``state_types`` order): a vector of its length, but
        a per-leaf state holding one leaf of rank >= 1 has the leaf's shape (no reshape on
        its way in or out of the program)."""
        out: List[Tuple[int, ...]] = []
        for dtype, _ in _TAGS:
            sets = self.state_sets(dtype)
            shaped = [_shaped(self, c) for c in chunks(self, dtype)] if self.per_leaf else \
                [None] * len(sets)
            for (names, lo, hi), shape in zip(sets, shaped):
                out += [shape or (hi - lo,)] * len(names)
        return out

    def piece_names(self, dtype: str) -> List[str]:
        """The graph names of every state of ``dtype``, set after set."""
        return [n for names, _, _ in self.state_sets(dtype) for n in names]


def make_layout(names: Sequence[str], roles: Sequence[str], structs,
                codec: Codec = CODECS["f16x3"], *, prefix: str = "state",
                what: str = "state='mlstate'", instead: str = "use state='io'",
                chunk: Optional[int] = None, per_leaf: bool = False) -> Layout:
    """Where each leaf (``structs``: shape and canonical numpy dtype) lives in the states."""
    slots, offsets = [], {"float32": 0, "int32": 0}
    for name, role, t in zip(names, roles, structs):
        dt = np.dtype(t.dtype).name
        if dt not in offsets:
            raise ArgumentError(f"{what} stores float32 and int32 leaves; '{name}' is "
                                f"{dt} ({instead})")
        size = int(np.prod(t.shape, dtype=np.int64))
        slots.append(Slot(name, role, dt, tuple(t.shape), offsets[dt], size))
        offsets[dt] += size
    return Layout(tuple(slots), sum(r == "param" for r in roles), codec, prefix, chunk,
                  per_leaf)


def state_bindings(layout: Layout) -> Dict[str, str]:
    """Each state's graph input name -> the graph output written back into it."""
    return {name: "new." + name for name, _, _ in layout.states()}


#: the codec runs on chunks of the packed vector of at most this many elements: runs of
#: consecutive leaves of one dtype and role, a larger leaf cut into several chunks. Its
#: elementwise temporaries are a chunk's size, not the whole vector's, and the ops it costs
#: (~40 per chunk to encode, ~15 to decode) stay a few thousand on a model of GPT-2's size.
CHUNK = 2 ** 23


#: a leaf larger than a chunk is cut into pieces of a chunk / BIG_LEAF_PIECES: its update
#: comes when its whole gradient is complete (a tied embedding's, at the very end), every
#: piece of that gradient live, and each piece's update holds some eight temporaries of the
#: piece's size (its value, moments, their new values, the codec's); GPT-2 small at seq
#: 128: 494.5 MiB of temporaries with whole chunks, 442.1 with quarters
BIG_LEAF_PIECES = 4
#: ... but no piece under this many values unless the chunk is (each piece costs the
#: codec's ~55 ops whatever its size)
MIN_PIECE = 2 ** 16


#: one piece of a chunk: (slot, first element, end element) of the slot's flat values
Segment = Tuple[Slot, int, int]


def chunks(layout: Layout, dtype: str) -> List[List[Segment]]:
    """The slots of ``dtype`` in layout order, cut into the codec's chunks (the layout's
    ``chunk``, else ``CHUNK``): never a chunk holding leaves of two roles, and, where a
    role's leaves are more than a chunk, one chunk per subtree of the pytree that fits
    (``_subtrees``: a GPT-2 block's leaves, not the end of block 1 with the start of block
    10, whose gradients are ready far apart, so that a chunk can be updated, encoded and
    written as soon as its own gradients exist), subtrees of under an eighth of a chunk
    together, and a leaf larger than a chunk cut into pieces of a ``BIG_LEAF_PIECES``-th
    of a chunk, of whole rows (its leading axis) where they fit (mlstate_graph.py then
    slices a piece out of a new value without a flat copy of it)."""
    if layout.per_leaf:   # in packed-vector order (a loaded layout lists its slots by name)
        return _per_leaf(sorted(layout.group(dtype), key=lambda s: s.offset))
    limit = CHUNK if layout.chunk is None else layout.chunk
    out: List[List[Segment]] = []
    slots = layout.group(dtype)
    runs = [[s for s in slots if s.role == r] for r in dict.fromkeys(s.role for s in slots)]
    for run in runs:
        merging = False
        for tree in _subtrees(run, limit, 0):
            n = sum(s.size for s in tree)
            if merging and n <= limit // 8 and sum(b - a for _, a, b in out[-1]) + n <= limit // 8:
                out[-1] += [(s, 0, s.size) for s in tree]
                continue
            merging = n <= limit // 8
            if n <= limit:
                out.append([(s, 0, s.size) for s in tree])
                continue
            (s,) = tree   # one leaf larger than a chunk: pieces of whole rows if they fit
            row = int(np.prod(s.shape[1:], dtype=np.int64))
            piece = max(limit // BIG_LEAF_PIECES, min(limit, MIN_PIECE))
            step = piece // row * row if 0 < row <= piece else piece
            out += [[(s, lo, min(s.size, lo + step))] for lo in range(0, s.size, step)]
    return out


def _per_leaf(slots: List[Slot]) -> List[List[Segment]]:
    """One chunk per leaf (``Layout.per_leaf``); a zero-size leaf joins a neighbour's chunk
    (a state has at least one element)."""
    out: List[List[Segment]] = []
    empty: List[Segment] = []
    for s in slots:
        if not s.size:
            (out[-1] if out else empty).append((s, 0, 0))
        else:
            out.append(empty + [(s, 0, s.size)])
            empty = []
    return out


def _shaped(layout: Layout, chunk: List[Segment]) -> Optional[Tuple[int, ...]]:
    """The leaf's shape for a per-leaf state holding one whole leaf of rank >= 1."""
    if layout.per_leaf and len(chunk) == 1 and len(chunk[0][0].shape) >= 1:
        return chunk[0][0].shape
    return None


def _subtrees(slots: List[Slot], limit: int, depth: int) -> List[List[Slot]]:
    """Consecutive ``slots`` grouped by the pytree path their names give ('params.h_1.
    attn.kernel'): the whole run if it fits ``limit`` (or is one leaf), else split by its
    path component at ``depth``, each part grouped again one level deeper."""
    if len(slots) == 1 or sum(s.size for s in slots) <= limit:
        return [slots]
    key = lambda s: tuple(s.name.split("."))[depth:depth + 1]  # noqa: E731
    parts: List[List[Slot]] = []
    for s in slots:
        if parts and key(parts[-1][-1]) == key(s):
            parts[-1].append(s)
        else:
            parts.append([s])
    if len(parts) == 1 and not key(slots[0]):  # names exhausted: one leaf at a time
        parts = [[s] for s in slots]
    return [t for p in parts for t in _subtrees(p, limit, depth + 1)]


def _bounds(chunk: List[Segment]) -> Tuple[int, int]:
    """(first, end element) of a chunk in the packed vector of its dtype."""
    return chunk[0][0].offset + chunk[0][1], chunk[-1][0].offset + chunk[-1][2]


def unpack(layout: Layout, *pieces, role: Optional[str] = None):
    """Traced: state pieces (in ``state_types`` order) -> leaves in layout order (``role``:
    only the leaves of that role, and ``pieces`` only of the states that hold them). Each
    chunk (``chunks``) is decoded on its own - from its own states, or sliced out of the
    whole vector's - the codec is elementwise, so these are the bits decoding the whole
    vector gives - and the memory order (coreml/mil_order.py) can read and decode a chunk
    when its leaves are first needed."""
    it = iter(pieces)
    parts: Dict[str, list] = {s.name: [] for s in layout.slots}
    for dtype, _ in _TAGS:
        sets = layout.state_sets(dtype)
        cut = chunks(layout, dtype)
        if len(sets) == 1 and not layout.per_leaf:  # one set: each chunk sliced out of it
            if role is not None and all(s.role != role for s in layout.group(dtype)):
                continue
            packed = [next(it) for _ in layout.codec.pieces(dtype)]
            views = [[_slice(p, *_bounds(c)) for p in packed] for c in cut]
        else:
            views = [[next(it) for _ in layout.codec.pieces(dtype)]
                     if role is None or c[0][0].role == role else None for c in cut]
        for chunk, view in zip(cut, views):
            if view is None or (role is not None and chunk[0][0].role != role):
                continue
            lo = _bounds(chunk)[0]
            flat = layout.codec.decode(dtype, *view)
            if _shaped(layout, chunk):  # the leaf itself, in its shape
                parts[chunk[0][0].name].append(flat)
                continue
            for s, a, b in chunk:
                parts[s.name].append(_slice(flat, s.offset + a - lo, s.offset + b - lo))
    return [_concat(parts[s.name]).reshape(s.shape) for s in layout.slots
            if role is None or s.role == role]


def role_states(layout: Layout, role: str) -> List[str]:
    """The graph names of the states ``unpack(..., role=role)`` reads, in order."""
    out: List[str] = []
    for dtype, _ in _TAGS:
        sets = layout.state_sets(dtype)
        if len(sets) == 1:
            if any(s.role == role for s in layout.group(dtype)):
                out += sets[0][0]
        else:
            out += [n for (names, _, _), c in zip(sets, chunks(layout, dtype))
                    if c[0][0].role == role for n in names]
    return out


def pack(layout: Layout, *leaves):
    """Traced: leaves in layout order -> state pieces: each chunk encoded on its own (as
    ``unpack`` decodes), into its own states or concatenated into the whole vector's."""
    flat = {s.name: x.reshape(-1) for s, x in zip(layout.slots, leaves)}
    out = []
    for dtype, _ in _TAGS:
        if not layout.length(dtype):
            continue
        encoded = [layout.codec.encode(dtype, leaves[layout.slots.index(chunk[0][0])]
                                       if _shaped(layout, chunk) else
                                       _concat([_slice(flat[s.name], a, b)
                                                for s, a, b in chunk]))
                   for chunk in chunks(layout, dtype)]
        if len(layout.state_sets(dtype)) == 1:
            out += [_concat(list(parts)) for parts in zip(*encoded)]
        else:
            out += [p for parts in encoded for p in parts]
    return out


def _slice(x, lo, hi):
    return x if (lo, hi) == (0, x.shape[0]) else lax.slice(x, (lo,), (hi,))


def _concat(xs):
    return xs[0] if len(xs) == 1 else jnp.concatenate(xs)


# -- graph rewrite: io-mode graph -> state graph: mlstate_graph.py ``rewrite_to_states``


# -- the same packing on the host ----------------------------------------------------
def host_pack(layout: Layout, leaves) -> Dict[str, np.ndarray]:
    out = {}
    for dtype, _ in _TAGS:
        # in packed-vector order (a loaded layout lists its slots by name)
        group = [np.asarray(x, dtype).reshape(-1) for s, x in
                 sorted(zip(layout.slots, leaves), key=lambda sx: sx[0].offset)
                 if s.dtype == dtype]
        if group:
            pieces = layout.codec.host_encode(dtype, np.concatenate(group))
            cut = chunks(layout, dtype)
            for (names, lo, hi), c in zip(layout.state_sets(dtype), cut):
                shape = _shaped(layout, c)
                out.update((n, p[lo:hi].reshape(shape or (hi - lo,)))
                           for n, p in zip(names, pieces))
    return out


def host_unpack(layout: Layout, pieces: Dict[str, np.ndarray]) -> List[np.ndarray]:
    flat = {}
    for dtype, _ in _TAGS:
        sets = layout.state_sets(dtype)
        if sets:
            flat[dtype] = layout.codec.host_decode(dtype, *(
                _np_concat([pieces[names[i]] for names, _, _ in sets])
                for i in range(len(layout.codec.pieces(dtype)))))
    return [flat[s.dtype][s.offset:s.offset + s.size].reshape(s.shape).copy()
            for s in layout.slots]


def _np_concat(xs):
    xs = [np.asarray(x).reshape(-1) for x in xs]  # (per-leaf states have their leaf's shape)
    return xs[0] if len(xs) == 1 else np.concatenate(xs)
