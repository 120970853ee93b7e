"""``state="mlstate"``: the graph rewrite from an io-mode training graph to one on states.

``rewrite_to_states`` replaces the parameter and optimizer-state inputs of a training graph
by the format's states, decoded (states/mlstate.py ``unpack``), and its new values by the
encoded writes (``pack``). Two things keep the step's temporaries small:

* **Reading again** (``phase_of``): a decoded parameter read in the forward pass, again in
  the backward pass and once more by the update would be a temporary from its first
  reader to its last - every parameter of the model live through the forward-to-backward
  gap (GPT-2 small: 474 MiB). Instead each phase that reads a state's leaves reads the
  state again and decodes it on its own (a graph input ``reread_name(state, phase)``,
  rlxjax/program.py): every read comes before the state's write, and the codec is
  elementwise and exact, so each phase gets the bits the first read gives. The re-reads
  are graph inputs of their own, so no CSE merges them back; the memory order
  (coreml/mil_order.py) moves each to where its phase first needs it. Only for a codec
  that computes when it reads (``Codec.read_again``: Core ML's fp16 pieces) and a layout
  cut into chunks (``Layout.chunked``: a model whose state is over a chunk); it costs one
  more decode of the parameters per extra phase (~15 ops per chunk). A smaller state is
  read and decoded once: keeping its decoded parameters live costs at most a chunk
  (MLP / transformer of bench/coreai_speed.py on Core ML: the same estimated peak, 74 /
  102 fewer ops and 16-19 % fewer bytes read and written).
* **Sinking the chunk slices** (``sink_slices``): ``pack`` cuts every new leaf into the
  codec's chunks (``reshape(-1)`` then a slice per chunk). When a new leaf is computed by
  elementwise ops only (an optax update: ``p + u``, Adam's moments), the slice is moved
  through them: ``slice(f(a, b)) == f(slice(a), slice(b))`` element for element, so every
  bit is the same, and each chunk's update runs on chunk-sized temporaries (a tied
  embedding's update no longer holds several temporaries of the whole table). The slices
  of the operands look through the decode's reshapes, concatenations and slices (a chunk
  of a decoded leaf is a slice of the decoded chunk itself).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from ..ir import Graph, Node, TensorType, Value, dtype_from_numpy
from ..ir.ops import OPS
from ..program import reread_name
from ..transforms.rewrite import dce, output_ids, substitute, users
from .mlstate import Layout, chunks, pack, state_bindings, unpack


def rewrite_to_states(g: Graph, layout: Layout, in_vals, out_vals, n_outputs: int,
                      phase_of: Optional[Callable[[Node], int]] = None) -> None:
    """Replace the graph inputs ``in_vals`` (params + optimizer state leaves, in ``layout``
    order) by decoded states and the outputs ``out_vals`` (their new values) by
    encoded writes named as ``state_bindings(layout)`` says. Keeps the first ``n_outputs``
    graph outputs (loss, aux). ``phase_of(node)``: the phase (0, 1, ...: forward, backward,
    update) of each node reading a leaf; each phase reads the states it needs again
    (module docstring; a codec without ``read_again``, or a layout in one chunk, reads
    once)."""
    from ..frontend.interpreter import Lowering

    if phase_of is None or not layout.codec.read_again or not layout.chunked:
        phase_of = lambda node: 0  # noqa: E731
    shapes = layout.state_shapes()
    types = [(name, TensorType(shape, dtype_from_numpy(np.dtype(dt))))
             for (name, _, _, dt), shape in zip(layout.state_types(), shapes)]
    drop = {v.id for v in in_vals}
    rest = [(n, v) for n, v in g.inputs if v.id not in drop]
    readers = users(g)
    phases = sorted({phase_of(r) for v in in_vals for r in readers.get(v.id, ())} | {0})
    closed = jax.make_jaxpr(lambda *p: unpack(layout, *p))(
        *[jax.ShapeDtypeStruct(shape, dt)
          for (_, _, _, dt), shape in zip(layout.state_types(), shapes)])
    reads: Dict[int, List[Value]] = {}     # phase -> its read of every state
    decoded: Dict[int, List[Value]] = {}   # phase -> its decoded leaves
    n0 = len(g.nodes)
    for k in phases:
        reads[k] = [g.new_value(t) for _, t in types]
        decoded[k] = Lowering(g).eval_jaxpr(closed.jaxpr, closed.consts, reads[k])
    decodes = g.nodes[n0:]
    g.nodes = decodes + g.nodes[:n0]   # the decodes read only the states: run them first
    index = {v.id: i for i, v in enumerate(in_vals)}
    for node in g.nodes[len(g.nodes) - n0:]:
        if any(v.id in index for v in node.inputs):
            k = phase_of(node)
            node.inputs = tuple(decoded[k][index[v.id]] if v.id in index else v
                                for v in node.inputs)
    first = {v.id: d for v, d in zip(in_vals, decoded[phases[0]])}
    substitute(g, first)   # graph outputs reading a leaf (aux) read the first phase's
    out_vals = [first.get(v.id, v) for v in out_vals]

    n1 = len(g.nodes)
    closed = jax.make_jaxpr(lambda *xs: pack(layout, *xs))(
        *[jax.ShapeDtypeStruct(v.type.shape, v.type.dtype.np) for v in out_vals])
    encoded = Lowering(g).eval_jaxpr(closed.jaxpr, closed.consts, out_vals)
    written = state_bindings(layout)
    ready = _readiness(g, phase_of, phases[-1])
    by_leaf = _write_order(layout)
    g.outputs = g.outputs[:n_outputs] + sorted(
        [(written[name], v) for (name, _, _), v in zip(layout.states(), encoded)],
        key=lambda item: (ready.get(item[1].id, -1),) + by_leaf(item))
    sink_slices(g, g.nodes[n1:])
    scalar_operands(g, decodes + g.nodes[n1:])
    dce(g)
    _just_in_time(g, decodes)
    # each state's first read is the earliest phase that still reads it; later phases'
    # reads are re-reads, unread ones go
    live = {v.id for n in g.nodes for v in n.inputs} | output_ids(g)
    states, again = [], []
    for i, (name, _) in enumerate(types):
        used = [k for k in phases if reads[k][i].id in live]
        states.append((name, reads[used[0] if used else phases[0]][i]))
        again += [(reread_name(name, str(k)), reads[k][i]) for k in used[1:]]
    g.inputs = states + again + rest


def _just_in_time(g: Graph, movable: Sequence[Node]) -> None:
    """Each of the ``movable`` nodes (the decodes, which read only the states) just before
    the first node reading it, in their order: the lowering emits the ops in graph order,
    and the memory order (coreml/mil_order.py) starts from it and visits what an op needs
    in it - a later phase's decode then comes after the gradients the same update needs,
    not before them."""
    ids = {id(n) for n in movable}
    rest = [n for n in g.nodes if id(n) not in ids]
    at = {id(n): i for i, n in enumerate(rest)}
    readers = users(g)
    anchor: Dict[int, int] = {}
    for n in reversed([n for n in g.nodes if id(n) in ids]):
        anchor[id(n)] = min((anchor[id(r)] if id(r) in ids else at[id(r)]
                             for v in n.outputs for r in readers.get(v.id, ())),
                            default=len(rest))
    before: Dict[int, List[Node]] = {}
    for n in g.nodes:
        if id(n) in ids:
            before.setdefault(anchor[id(n)], []).append(n)
    g.nodes = [m for i, n in enumerate(rest) for m in before.get(i, []) + [n]] + \
        before.get(len(rest), [])


def _readiness(g: Graph, phase_of, last: int) -> Dict[int, int]:
    """value id -> the position of the latest node before the last phase (the update) it
    depends on: when a state's new value can be computed (a block's gradients are
    complete), so that the writes are listed in the order the backward pass makes them
    ready."""
    ready: Dict[int, int] = {}
    for i, n in enumerate(g.nodes):
        r = max((ready.get(v.id, -1) for v in n.inputs), default=-1)
        if n.inputs and phase_of(n) < last:
            r = i
        for v in n.outputs:
            ready[v.id] = r
    return ready


def _write_order(layout: Layout):
    """A sort key for the state writes: each chunk by the first parameter its leaves
    belong to (an optimizer-state leaf by the parameter whose path ends its own:
    'opt_state.0.mu.params.h_1.kernel' -> 'params.params.h_1.kernel') and where in that
    leaf it starts, so that a parameter chunk's write comes next to those of its moments (after
    ``_readiness``: the memory order starts from the writes in this order,
    coreml/mil_order.py)."""
    params = {s.name.split(".", 1)[-1]: i for i, s in enumerate(layout.slots)
              if s.role == "param"}

    def leaf_key(name: str) -> int:
        parts = name.split(".")
        return next((params[k] for k in (".".join(parts[i:]) for i in range(len(parts)))
                     if k in params), len(layout.slots))

    key: Dict[str, tuple] = {}
    for dtype, tag in (("float32", "f32"), ("int32", "i32")):
        for (names, lo, hi), chunk in zip(layout.state_sets(dtype), _set_chunks(layout, dtype)):
            k = min(((leaf_key(s.name), a) for s, a, _ in chunk),
                    default=(len(layout.slots), 0))
            key.update((n, k + (lo,)) for n in names)
    written = state_bindings(layout)
    by_output = {written[n]: k for n, k in key.items()}
    return lambda item: by_output.get(item[0], (len(layout.slots), 0, 0))


def _set_chunks(layout: Layout, dtype: str):
    """The segments each set of states of ``dtype`` holds (one set: all of them)."""
    sets = layout.state_sets(dtype)
    cut = chunks(layout, dtype)
    return [[seg for c in cut for seg in c]] if len(sets) == 1 else cut


def scalar_operands(g: Graph, nodes: Sequence[Node]) -> None:
    """An elementwise node among ``nodes`` reading a scalar broadcast to its shape
    (``jnp.where(c, 0.0, x)``) reads the scalar: its values are the same (numpy
    broadcasting), and no constant tensor of the chunk's size is made (shared by every
    chunk's encode, it would be live from the first to the last)."""
    def scalar(v: Value) -> Optional[Value]:
        b = v.node
        return b.inputs[0] if b is not None and b.op == "broadcast_in_dim" and \
            b.inputs[0].type.rank == 0 else None

    for n in nodes:
        if not _elementwise(n):
            continue
        shape = n.outputs[0].type.shape
        if any(v.type.shape == shape and scalar(v) is None for v in n.inputs):
            n.inputs = tuple(scalar(v) or v for v in n.inputs)


# -- sinking the chunk slices through elementwise updates ------------------------------
def _elementwise(node: Node) -> bool:
    opdef = OPS.get(node.op)
    if opdef is None or opdef.family != "elementwise" or not opdef.pure or node.regions \
            or len(node.outputs) != 1:
        return False
    t = node.outputs[0].type
    return t.is_static and all(v.type.shape == t.shape or v.type.rank == 0
                               for v in node.inputs)


def _flat_slice(node: Node, source: Value, flats: Dict[int, Node]):
    """(start, end) if ``node`` is a stride-1 slice of ``source`` flattened (``source``
    itself when it is 1-D, else its ``reshape(-1)`` node given in ``flats``), else None."""
    if node.op != "slice" or tuple(node.params["strides"]) != (1,):
        return None
    x = node.inputs[0]
    if x is not source and (x.node is None or flats.get(source.id) is not x.node):
        return None
    return int(node.params["start"][0]), int(node.params["limit"][0])


def sink_slices(g: Graph, pack_nodes: Sequence[Node]) -> int:
    """Move the chunk slices ``pack`` made (among ``pack_nodes``) through the elementwise
    ops computing the new leaves (module docstring). A node is moved only when every reader
    of its value is such a slice or another moved node, so the whole-leaf value is gone
    afterwards. Returns how many slices now read chunk-sized values."""
    readers = users(g)
    outs = output_ids(g)
    in_pack = {id(n) for n in pack_nodes}
    flats: Dict[int, Node] = {}   # value id -> a pack node reshaping it to 1-D
    for n in pack_nodes:
        if n.op == "reshape" and n.outputs[0].type.rank == 1:
            flats.setdefault(n.inputs[0].id, n)

    def slicer(r: Node, v: Value) -> bool:
        """Whether ``r`` only cuts ``v`` into flat slices made by pack."""
        if id(r) not in in_pack:
            return False
        if r.op == "slice":
            return _flat_slice(r, v, flats) is not None
        return flats.get(v.id) is r and all(
            id(s) in in_pack and _flat_slice(s, v, flats) is not None
            for s in readers.get(r.outputs[0].id, ()))

    sunk = set()
    for n in reversed(g.nodes):
        v = n.outputs[0] if len(n.outputs) == 1 else None
        rs = readers.get(v.id, ()) if v is not None else ()
        if rs and v.id not in outs and _elementwise(n) and \
                all(id(r) in sunk or slicer(r, v) for r in rs):
            sunk.add(id(n))

    memo: Dict[tuple, Value] = {}
    flat_of: Dict[int, Value] = {}

    def add(op, inputs, params, source=None) -> Value:
        return g.add_node(op, inputs, dict(params), source).outputs[0]

    def flat(x: Value) -> Value:
        if x.type.rank == 1:
            return x
        if x.id not in flat_of:
            flat_of[x.id] = add("reshape", [x], {"shape": (int(np.prod(x.type.shape)),)})
        return flat_of[x.id]

    def view(x: Value, a: int, b: int) -> Value:
        """``reshape(x, -1)[a:b]``, looking through reshapes, 1-D concatenations and 1-D
        slices (a decoded leaf is a concatenation of slices of decoded chunks)."""
        size = int(np.prod(x.type.shape, dtype=np.int64))
        if x.type.rank == 1 and (a, b) == (0, size):
            return x
        n = x.node
        if n is not None and n.op == "reshape":
            return view(n.inputs[0], a, b)
        if n is not None and n.op == "slice" and x.type.rank == 1 and \
                tuple(n.params["strides"]) == (1,):
            s = int(n.params["start"][0])
            return view(n.inputs[0], a + s, b + s)
        if n is not None and n.op == "concatenate" and x.type.rank == 1:
            parts, lo = [], 0
            for p in n.inputs:
                hi = lo + p.type.shape[0]
                if lo < b and a < hi:
                    parts.append(view(p, max(a, lo) - lo, min(b, hi) - lo))
                lo = hi
            return parts[0] if len(parts) == 1 else add("concatenate", parts, {"axis": 0})
        row = int(np.prod(x.type.shape[1:], dtype=np.int64)) if x.type.rank > 1 else 0
        if row and a % row == 0 and b % row == 0:  # whole rows: no flat copy of x
            start = (a // row,) + (0,) * (x.type.rank - 1)
            rows = add("slice", [x], {"start": start, "limit": (b // row,) + x.type.shape[1:],
                                      "strides": (1,) * x.type.rank})
            return add("reshape", [rows], {"shape": (b - a,)})
        return add("slice", [flat(x)], {"start": (a,), "limit": (b,), "strides": (1,)})

    def build(x: Value, a: int, b: int) -> Value:
        key = (x.id, a, b)
        if key not in memo:
            n = x.node
            if n is not None and id(n) in sunk:
                ins = [build(i, a, b) if i.type.shape == x.type.shape else i
                       for i in n.inputs]
                memo[key] = add(n.op, ins, n.params, n.source)
            else:
                memo[key] = view(x, a, b)
        return memo[key]

    mapping: Dict[int, Value] = {}
    placed: Dict[int, List[Node]] = {}
    for s in [n for n in g.nodes if id(n) in in_pack and n.op == "slice"]:
        x = s.inputs[0]
        v = flats_source(x, flats)
        if v is None or v.node is None or id(v.node) not in sunk:
            continue
        a, b = _flat_slice(s, v, flats)
        before = len(g.nodes)
        mapping[s.outputs[0].id] = build(v, a, b)
        placed[id(s)] = g.nodes[before:]
        del g.nodes[before:]
    if not mapping:
        return 0
    order: List[Node] = []
    for n in g.nodes:
        order += placed.get(id(n), [])
        order.append(n)
    g.nodes = order
    substitute(g, mapping)
    return len(mapping)


def flats_source(x: Value, flats: Dict[int, Node]) -> Optional[Value]:
    """The value a pack slice's input ``x`` flattens: ``x`` itself when 1-D and not a
    pack reshape, else what that reshape reads."""
    if x.node is not None and x.node.op == "reshape" and flats.get(x.node.inputs[0].id) is x.node:
        return x.node.inputs[0]
    return x if x.type.rank == 1 else None
