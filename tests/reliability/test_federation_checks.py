"""Federation checks what it averages: a node whose reply is mis-shaped, non-finite or
names other arrays is dropped by node with a log line, and the round goes on with the
others - the result is plain JAX + optax FedAvg over the good nodes."""
import logging
import os
import sys

import numpy as np
import pytest

from helpers import skip_module_without  # noqa: E402

skip_module_without("flwr", "flwr_datasets", "sklearn")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "flower"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "flower"))

import jax  # noqa: E402
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

import fed_digits as fd  # noqa: E402
import rlxjax  # noqa: E402
from inprocess import InProcessGrid  # noqa: E402
from rlxjax.flower import NodeData, Task, client_app, partition_of  # noqa: E402
from rlxjax.flower.server import run_strategy  # noqa: E402

LOCAL, ROUNDS = 2, 2


def _broken(kind, arrays: ArrayRecord) -> ArrayRecord:
    out = {n: a.numpy() for n, a in arrays.items()}
    name = next(iter(out))
    if kind == "shape":      # (m, n) sent as (1, m, n): would broadcast into the average
        out[name] = out[name].reshape((1,) + out[name].shape)
    elif kind == "nan":
        out[name] = out[name].copy()
        out[name].flat[0] = np.nan
    elif kind == "dtype":
        out[name] = out[name].astype(np.float16)
    elif kind == "missing":
        del out[name]
    return ArrayRecord({n: Array(a) for n, a in out.items()})


class OneBadNode(InProcessGrid):
    """Node ``bad`` replies to every train message with a broken array."""

    def __init__(self, app, n, bad, kind):
        super().__init__(app, n)
        self.bad, self.kind = bad, kind

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout=timeout)
        out = []
        for msg, reply in zip(messages, replies):
            if msg.metadata.dst_node_id == self.bad and msg.metadata.message_type == "train" \
                    and not reply.has_error():
                content = RecordDict({k: (_broken(self.kind, v) if isinstance(v, ArrayRecord)
                                          else v) for k, v in reply.content.items()})
                reply = Message(content, reply_to=msg)
            out.append(reply)
        return out


@pytest.mark.parametrize("kind", ["shape", "nan"] + [
    pytest.param(k, marks=pytest.mark.slow) for k in ("dtype", "missing")])
def test_a_bad_reply_is_dropped_by_node_and_the_round_goes_on(kind, caplog):
    batches = fd.node_batches(3)
    task = Task(lambda: rlxjax.coreml_train_step(fd.loss, fd.optimizer(),
                                                 trainable=rlxjax.lora.TRAINABLE),
                fd.initial_tree())
    app = client_app(task, lambda ctx: NodeData(batches[partition_of(ctx)[0]]),
                     local_steps=LOCAL)
    grid = OneBadNode(app, 3, bad=101, kind=kind)
    with caplog.at_level(logging.WARNING, logger="rlxjax.flower"):
        out = run_strategy(task, FedAvg(fraction_evaluate=0.0, min_available_nodes=3,
                                        min_train_nodes=3), grid, num_rounds=ROUNDS)
    assert sorted(out.dropped) == list(range(1, ROUNDS + 1))
    assert all([node for node, _ in out.dropped[r]] == [101] for r in out.dropped)
    lines = [r.getMessage() for r in caplog.records if "dropped the train reply" in r.getMessage()]
    assert len(lines) == ROUNDS and all("node 101" in line for line in lines)
    tree = fd.initial_tree()
    history, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(),
                                     [batches[0], batches[2]], rounds=ROUNDS,
                                     local_steps=LOCAL)
    for a, b in zip(jax.tree_util.tree_leaves(out.params["lora"]),
                    jax.tree_util.tree_leaves(history[-1])):
        scale = float(np.max(np.abs(b)))
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4 * scale)


def test_the_client_refuses_non_finite_arrays_by_name():
    batches = fd.node_batches(1)
    task = Task(lambda: rlxjax.coreml_train_step(fd.loss, fd.optimizer(),
                                                 trainable=rlxjax.lora.TRAINABLE),
                fd.initial_tree())
    app = client_app(task, lambda ctx: NodeData(batches[0]), local_steps=1)
    grid = InProcessGrid(app, 1)
    arrays = _broken("nan", rlxjax.flower.to_arrays(task.initial_state().params))
    msg = Message(RecordDict({"arrays": arrays, "config": ConfigRecord({})}), 100, "train")
    reply = grid.send_and_receive([msg])[0]
    assert reply.has_error() and "NaN or an infinity" in reply.error.reason
