"""A Flower Grid that runs the ClientApps in this process, for the fast tests.

Flower's Simulation Engine (``run_simulation``) starts Ray and one actor per CPU, which costs
~20 s here before the first message; the default suite's Flower tests instead hand each
message straight to the ClientApp, with one persistent ``Context`` per node (what the
engines keep for a node between rounds). The strategies, mods and the ClientApp are
Flower's and rlxjax's own; the slow tests run the same federations through
``run_simulation`` and compare."""
from __future__ import annotations

import uuid

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


class InProcessGrid(Grid):
    def __init__(self, client_app, num_nodes: int, node_config=None):
        self.app = client_app
        # what a ServerApp process's runtime sets before its main: Message() reads them
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
        self.contexts = {
            100 + i: Context(run_id=1, node_id=100 + i,
                             node_config={"partition-id": i, "num-partitions": num_nodes,
                                          **(node_config or {})},
                             state=RecordDict(), run_config={})
            for i in range(num_nodes)}

    def set_run(self, run):
        pass

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            msg.metadata.__dict__["_src_node_id"] = 0
            try:
                reply = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            except Exception as e:  # as the engines do: the exception becomes an Error reply
                reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      f"{type(e).__name__}: {e}"), reply_to=msg)
            replies.append(reply)
        return replies
