"""``client_app``: a Flower ``ClientApp`` that trains through the compiled train step.

On a ``train`` message the node reads the global trainable leaves from the message's
ArrayRecord (by name: arrays.py), loads them into its TrainState with the optimizer state
and step count it kept in its ``Context.state`` (its first round: the optimizer's init),
runs the compiled step for the configured local steps on its own batches, keeps the new
optimizer state, and replies with the new leaves - the same names, in the order they came -
and a MetricRecord: ``num-examples`` (examples seen this round, FedAvg's weight),
``train-loss`` (mean loss of the round's steps), ``local-steps``. On an ``evaluate`` message
it runs the task's evaluation program on its held-out batches and replies with the
example-weighted means and ``num-examples``.

Local work per round: ``local-steps`` from the message's ConfigRecord, else ``local-epochs``
(passes over the node's train batches), else the ``local_steps`` given here. Batch ``i`` of
the node's ``n`` batches is the one its step count ``i`` selects (``step % n``), so a node
continues through its data across rounds.

The same handler speaks Flower's legacy layout (``fitins.parameters``), which the SecAgg+
workflow uses (secagg.py).
"""
from __future__ import annotations

from typing import Callable, List, Optional

import jax
import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ..errors import ArgumentError
from ..training.export import numpy_tree
from ..training.state import TrainState
from .arrays import from_arrays, load_node_state, save_node_state
from .task import NodeData, Task, batch_size

#: the keep / reset policies for a node's optimizer state between rounds
OPTIMIZER_STATE = ("keep", "reset")


def client_app(task: Task, data: Callable[[Context], NodeData], *, local_steps: int = 1,
               optimizer_state: str = "keep", mods: Optional[list] = None) -> ClientApp:
    """A Flower ``ClientApp`` that trains ``task``'s step on ``data(context)`` (the node's
    batches: ``NodeData``; ``partition_of(context)`` gives the node's partition).

    ``optimizer_state="keep"``: each node keeps its optimizer state (Adam's moments, a
    momentum trace) and step count across rounds in its ``Context.state``; ``"reset"``
    starts every round from the optimizer's init. ``mods``: Flower mods wrapped around the
    app (``fixedclipping_mod``, ``secaggplus_mod``, ``arrays_size_mod``)."""
    if not isinstance(task, Task):
        raise ArgumentError("client_app(task, data): task is an rlxjax.flower.Task")
    if optimizer_state not in OPTIMIZER_STATE:
        raise ArgumentError(f"optimizer_state={optimizer_state!r}: choose 'keep' (kept in "
                            "the node's Context.state between rounds) or 'reset'")
    if not isinstance(local_steps, int) or local_steps < 1:
        raise ArgumentError(f"local_steps={local_steps!r}: a positive int")
    node = _Node(task, data, local_steps, optimizer_state)
    app = ClientApp(mods=mods)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        from .secagg import is_legacy, legacy_train

        if is_legacy(msg):
            return legacy_train(node, msg, context)
        return node.train(msg, context)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return node.evaluate(msg, context)

    return app


def _only(records, kind: str, msg: Message):
    if len(records) != 1:
        raise ArgumentError(f"the {msg.metadata.message_type} message carries "
                            f"{len(records)} {kind}s ({sorted(records)}); rlxjax's client "
                            f"reads exactly one")
    return next(iter(records.items()))


class _Node:
    """What a ClientApp does on one message (one instance per process; the per-node
    state lives in each node's Context)."""

    def __init__(self, task: Task, data, local_steps: int, optimizer_state: str):
        self.task, self.data, self.local_steps = task, data, local_steps
        self.optimizer_state = optimizer_state
        self._data = {}

    def node_data(self, context: Context) -> NodeData:
        data = self._data.get(context.node_id)
        if data is None:
            data = self._data[context.node_id] = self.data(context)
            if not isinstance(data, NodeData):
                raise ArgumentError(f"the data function returned {type(data).__name__}, "
                                    "not rlxjax.flower.NodeData(train=..., test=...)")
        return data

    def steps_for(self, config, n_batches: int) -> int:
        if "local-steps" in config:
            return int(config["local-steps"])
        if "local-epochs" in config:
            return int(config["local-epochs"]) * n_batches
        return self.local_steps

    def fit(self, trainable, config, context: Context):
        """Train from the global ``trainable`` leaves: (new leaves, metrics dict)."""
        rt = self.task.runtime()
        data = self.node_data(context)
        kept = load_node_state(context, rt.init.opt_state)
        if kept is None or self.optimizer_state == "reset":
            opt_state = numpy_tree(rt.step.optimizer.init(trainable))
            step0 = 0 if kept is None else kept[1]
            rounds = 0 if kept is None else kept[2]
        else:
            opt_state, step0, rounds = kept
        state = TrainState(trainable, opt_state, step0)
        losses: List[float] = []
        seen = 0
        for _ in range(self.steps_for(config, len(data.train))):
            batch = data.train[state.step % len(data.train)]
            out = rt.step(state, *batch)
            state, loss = out[0], float(out[1])
            losses.append(loss)
            seen += batch_size(batch)
        save_node_state(context, state.opt_state, state.step, rounds + 1)
        metrics = {"num-examples": seen, "train-loss": float(np.mean(losses)) if losses
                   else float("nan"), "local-steps": len(losses)}
        return state.params, metrics

    def train(self, msg: Message, context: Context) -> Message:
        content = msg.content
        key, record = _only(content.array_records, "ArrayRecord", msg)
        config = next(iter(content.config_records.values()), {})
        rt = self.task.runtime()
        trainable = from_arrays(record, rt.init.params)
        new, metrics = self.fit(trainable, config, context)
        out = dict(zip(rt.names, jax.tree_util.tree_leaves(new)))
        reply = ArrayRecord({name: Array(np.asarray(out[name])) for name in record.keys()})
        return Message(RecordDict({key: reply, "metrics": MetricRecord(metrics)}),
                       reply_to=msg)

    def evaluate(self, msg: Message, context: Context) -> Message:
        _, record = _only(msg.content.array_records, "ArrayRecord", msg)
        rt = self.task.runtime()
        data = self.node_data(context)
        batches = data.test if data.test else data.train
        full = rt.full_params(from_arrays(record, rt.init.params))
        fn = rt.evaluate_fn()
        sums, n = {}, 0
        for batch in batches:
            value = fn(full, *batch)
            values = value if isinstance(value, dict) else {"loss": value}
            k = batch_size(batch)
            for name, v in values.items():
                sums[name] = sums.get(name, 0.0) + float(np.asarray(v)) * k
            n += k
        metrics = {name: s / n for name, s in sums.items()}
        metrics["num-examples"] = n
        return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
