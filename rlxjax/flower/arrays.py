"""Trainable leaves as Flower arrays, and a node's own training state in ``Context.state``.

An ``ArrayRecord`` carries one ``Array`` per trainable leaf, named by its pytree path with
the keys joined by '/' - the tensor names ``step.export_params`` writes to safetensors
(training/params_io.py) - so a file, a Flower message and a device's features agree.
``Array`` stores each leaf as numpy's ``.npy`` bytes: exact, with shape and dtype.

Between rounds a node keeps its optimizer state and step count locally, in the Flower
``Context.state`` of that node (a ``RecordDict`` Flower keeps on the node for the whole run
and never sends): ``context.state["rlxjax.flower.opt_state"]`` is an ArrayRecord of the
optimizer state's leaves (named by position) and ``context.state["rlxjax.flower.node"]`` a
ConfigRecord with the step count and the rounds this node trained.
"""
from __future__ import annotations

from typing import List

import jax
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context

from ..errors import ArgumentError
from ..training.params_io import check_named, leaf_names

OPT_STATE = "rlxjax.flower.opt_state"
TRAIN = "rlxjax.flower.node"


def to_arrays(tree) -> ArrayRecord:
    """An ArrayRecord of the leaves of ``tree`` (numpy-convertible arrays), in leaf order,
    each named by its pytree path ('lora/Dense_0.kernel/a')."""
    names, leaves, _ = leaf_names(tree)
    return ArrayRecord({n: Array(np.asarray(x)) for n, x in zip(names, leaves)})


def from_arrays(record: ArrayRecord, like, where: str = "the Flower message",
                hint: str = "the server sent arrays of another model"):
    """The pytree of ``like`` read from ``record`` by name; each array is checked against
    ``like``'s leaf (ArgumentError naming a missing, extra, mis-shaped or mis-typed array,
    or one holding a NaN or an infinity)."""
    if not isinstance(record, ArrayRecord):
        raise ArgumentError(f"{where} carries no ArrayRecord of parameters")
    try:
        stored = {name: arr.numpy() for name, arr in record.items()}
    except Exception as e:  # noqa: BLE001 - undecodable bytes: a clear error, not a crash
        raise ArgumentError(f"{where} holds an array that cannot be decoded "
                            f"({type(e).__name__}: {e})") from None
    tree = check_named(stored, like, where, strict=True, hint=hint)
    for name, arr in stored.items():
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            raise ArgumentError(f"tensor '{name}' in {where} holds a NaN or an infinity: "
                                "refused (a diverged or corrupted update)")
    return tree


def record_bytes(record: ArrayRecord) -> int:
    """The bytes the arrays of ``record`` occupy in a Flower message (their serialised
    ``Array.data``: the raw values plus numpy's ``.npy`` header)."""
    return sum(len(a.data) for a in record.values())


def save_node_state(context: Context, opt_state, step: int, rounds: int) -> None:
    """Keep the node's optimizer state and step count in its Flower ``Context.state``."""
    leaves = jax.tree_util.tree_leaves(opt_state)
    context.state[OPT_STATE] = ArrayRecord(
        {str(i): Array(np.asarray(x)) for i, x in enumerate(leaves)})
    context.state[TRAIN] = ConfigRecord({"step": int(step), "rounds": int(rounds)})


def load_node_state(context: Context, like_opt_state):
    """(opt_state, step, rounds) kept by ``save_node_state``, or None on a node's first
    round. The leaves are checked against ``like_opt_state`` (the optimizer's own init)."""
    if OPT_STATE not in context.state.array_records:
        return None
    record = context.state.array_records[OPT_STATE]
    want, treedef = jax.tree_util.tree_flatten(like_opt_state)
    got: List[np.ndarray] = [record[str(i)].numpy() for i in range(len(record))]
    if len(got) != len(want) or any(np.shape(g) != np.shape(w) for g, w in zip(got, want)):
        raise ArgumentError("the optimizer state kept in this node's Context.state does not "
                            "fit the train step (another model trained on this node in the "
                            "same run?)")
    info = context.state.config_records[TRAIN]
    return jax.tree_util.tree_unflatten(treedef, got), int(info["step"]), int(info["rounds"])
