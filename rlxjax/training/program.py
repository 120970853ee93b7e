"""Building a training step's program: forward, backward and an optax update in one graph.

``build_train_graph`` turns the traced loss into the training graph, arranged as layout.py
says: the backward pass is rlxjax's own (fused norm backward ops); the optax update is
traced like any JAX code and inlined into the same graph, reading the gradients the
backward pass produced. With ``state="mlstate"`` the parameters and optimizer state then
become Core ML states (rlxjax/states/mlstate.py). pipeline.py runs it between the trace
and the format, and returns a ``TrainProgram``: the compiled program with its typed layout,
which also goes into the package metadata (``rlxjax.train``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import jax

from ..api import Compiled
from ..errors import ArgumentError, RlxError, ZeroSizeError
from ..frontend import Traced, path_name
from ..frontend.interpreter import Lowering
from ..ir import verify
from ..transforms.grad import backward
from ..transforms.rewrite import dce
from .layout import TrainLayout, leaf_struct, state_layout
from ..states.mlstate import Layout
from ..states.mlstate_graph import rewrite_to_states


# a placeholder leaf for the result's treedef (not None: a pytree's own None nodes,
# eqx.partition's, are no leaves)
_LEAF = object()


def build_train_graph(traced: Traced, args, optimizer, *, has_aux: bool, mode: str,
                      differentiate=None, codec: str = "f16x3",
                      grads_given: bool = False) -> Traced:
    """The training graph of the traced ``loss(params, *batch)`` (traced as a function of
    ``(params, opt_state, *batch)``); ``args`` are what it was traced with.
    ``differentiate``: the graph value the backward pass starts from, when it is not the
    loss output (precision="mixed": the loss times the loss scale, mixed_precision.py).
    ``grads_given``: the traced function returned ``(loss, gradients)`` (microbatch.py):
    those gradients are used, no backward pass is made."""
    params, opt_state = args[0], args[1]
    _refuse_empty(traced)
    g = traced.graph
    n_p = len(jax.tree_util.tree_leaves(params))
    given = None
    if grads_given:  # outputs: the loss, then one gradient per parameter leaf
        given = [v for _, v in g.outputs[1:1 + n_p]]
        g.outputs = g.outputs[:1]
        traced = dataclasses.replace(traced, out_tree=jax.tree_util.tree_structure(0.0))
    n_s = len(jax.tree_util.tree_leaves(opt_state))
    trained = [i for i in traced.dropped if i < n_p + n_s]
    if trained:
        name, _, dtype = traced.dropped[trained[0]]
        raise ArgumentError(f"'{name}' is {dtype}: params and optimizer state can hold only "
                            "trained float arrays (and int32); pass PRNG keys and RNG "
                            "counters in the batch")
    p_vals = [v for _, v in g.inputs[:n_p]]
    s_vals = [v for _, v in g.inputs[n_p:n_p + n_s]]
    n_out = traced.out_tree.num_leaves
    if (has_aux and len(traced.out_tree.children()) != 2) or (not has_aux and n_out != 1):
        raise ArgumentError("the loss must return a scalar" +
                            (" and aux as a pair (loss, aux)" if has_aux else
                             "; pass has_aux=True to return (loss, aux)"))
    loss_v = g.outputs[0][1]
    if loss_v.type.rank != 0 or not loss_v.dtype.is_float:
        raise ArgumentError(f"the loss must be a float scalar, got {loss_v.type}")
    for name, v in g.inputs[:n_p]:
        if not v.dtype.is_float:
            raise ArgumentError(f"parameter '{name}' is {v.dtype}: only float parameters "
                                "can be trained")
    host = traced.host
    if host is not None:  # random="inputs": aux may hold host results (a new RNG state)
        host.require_device_loss("coreml_train_step")
    grads = given if given is not None else backward(
        g, loss_v if differentiate is None else differentiate, p_vals,
        traced.custom_rules.backward)
    n_grad = len(g.nodes)
    new_p, new_s = _inline_update(g, optimizer, grads, s_vals, p_vals, params, opt_state)
    if mode == "mlstate":
        return _to_states(traced, args, p_vals + s_vals, new_p + new_s, codec,
                          _phases(g, loss_v, n_grad))

    p_paths = jax.tree_util.tree_flatten_with_path(params)[0]
    s_paths = jax.tree_util.tree_flatten_with_path(opt_state)[0]
    g.outputs = list(g.outputs) + \
        [(path_name("new.params", p), v) for (p, _), v in zip(p_paths, new_p)] + \
        [(path_name("new.opt_state", p), v) for (p, _), v in zip(s_paths, new_s)]
    dce(g)
    verify(g)
    blank = lambda t: jax.tree_util.tree_unflatten(  # noqa: E731
        t, [_LEAF] * t.num_leaves)
    result = (blank(traced.out_tree),
              blank(jax.tree_util.tree_structure(params)),
              blank(jax.tree_util.tree_structure(opt_state)))
    out_tree = jax.tree_util.tree_structure(result)  # (None nodes stay empty nodes)
    if host is not None:  # the host's aux results keep their places; then params, opt_state
        host = host.with_outputs(host.outputs + [None] * (len(new_p) + len(new_s)))
    return traced.derive(g, out_tree=out_tree, host=host)


def _refuse_empty(traced: Traced) -> None:
    """A training step's inputs and outputs feed the next call (or Core ML states) through
    its layout, which has no zero-size slots: refuse them clearly."""
    empty = list(traced.empty_in.values()) + list(traced.empty_out.values())
    if empty:
        e = empty[0]
        raise ZeroSizeError(
            f"'{e.name}' is zero-size ({e.dtype}{list(e.shape)}): a training step's "
            "parameters, optimizer state, batch and loss outputs must not be zero-size "
            "(Core ML has no zero-size tensors and the step's layout carries every one); "
            "leave it out of the parameters / batch (close over it) or out of aux")


def _inline_update(g, optimizer, grads, s_vals, p_vals, params, opt_state):
    import optax

    def update(grads, opt_state, params):
        updates, new_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state

    struct = lambda t: jax.tree_util.tree_map(leaf_struct, t)  # noqa: E731
    closed = jax.make_jaxpr(update)(struct(params), struct(opt_state), struct(params))
    outs = Lowering(g).eval_jaxpr(closed.jaxpr, closed.consts, grads + s_vals + p_vals)
    n_p = len(p_vals)
    return outs[:n_p], outs[n_p:]


def _phases(g, loss_v, n_grad: int):
    """``phase_of(node)`` for states/mlstate_graph.py's re-reads: 0 for the forward pass (what the
    loss depends on), 1 for the backward pass (the other nodes before the update, the
    first ``n_grad``), 2 for the optimizer update."""
    forward, todo = set(), [loss_v.node]
    while todo:
        n = todo.pop()
        if n is not None and id(n) not in forward:
            forward.add(id(n))
            todo.extend(v.node for v in n.inputs)
    position = {id(n): i for i, n in enumerate(g.nodes)}
    return lambda node: 0 if id(node) in forward else (
        1 if position.get(id(node), n_grad) < n_grad else 2)


def _to_states(traced: Traced, args, in_vals, out_vals, codec: str,
               phase_of=None) -> Traced:
    """mlstate: params and optimizer state become the format's states (states/mlstate.py)."""
    g, n = traced.graph, len(in_vals)
    layout = state_layout(args[0], args[1], codec)
    got = [(name, tuple(v.type.shape), v.dtype.np.name) for name, v in g.inputs[:n]]
    want = [(s.name, s.shape, s.dtype) for s in layout.slots]
    if got != want:
        raise RlxError(f"internal: the traced inputs {got} are not the state layout {want}")
    rewrite_to_states(g, layout, in_vals, out_vals, len(g.outputs), phase_of)
    dce(g)
    verify(g)
    batch = tuple(args[2:])
    return traced.derive(g, remove=range(n), in_tree=jax.tree_util.tree_structure(batch),
                         in_types=traced.in_types[n:])


@dataclass(frozen=True)
class TrainProgram:
    """A compiled training step and its layout."""

    compiled: Compiled
    layout: TrainLayout
    # mlstate: the (params, opt_state) shapes and dtypes it was compiled for, as pytrees of
    # ShapeDtypeStruct (the host values are not program inputs, so they key its cache)
    structs: Optional[Tuple[Any, Any]] = None
    # the arguments it was compiled for, as ShapeDtypeStructs (to lower it again: a
    # package whose other functions add states, training/functions.py)
    args: Tuple[Any, ...] = ()

    @property
    def state_layout(self) -> Optional[Layout]:
        return self.layout.tensors

    @property
    def trees(self):
        """The (params, opt_state) tree structures."""
        return tuple(jax.tree_util.tree_structure(t) for t in self.structs)
