"""``server_app``: a Flower ``ServerApp`` that federates a Task with any Flower strategy.

The ServerApp starts from the step's initial trainable leaves (``Task.initial_state``; with
``trainable=`` the frozen base is not among them and never travels) as an ArrayRecord named
by pytree path, and runs the strategy's own ``start`` (FedAvg, FedProx, FedAdam, a
differential-privacy wrapper...) for ``num_rounds``. The Grid it is given is wrapped to
count the bytes of the arrays each round sends and receives (``FederatedResult.bytes``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Union

from flwr.app import ConfigRecord, Context, Message, MessageType
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from ..errors import ArgumentError
from .arrays import from_arrays, record_bytes, to_arrays
from .task import Task

LOG = logging.getLogger("rlxjax.flower")


@dataclass
class RoundBytes:
    """The arrays one round moved: ``sent`` by the server (all nodes' messages), ``received``
    from the nodes (all replies), ``nodes`` the number of train replies."""

    sent: int = 0
    received: int = 0
    nodes: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.received


@dataclass
class FederatedResult:
    """What a ``server_app`` run produced: Flower's ``Result`` (``.arrays``, per-round
    metrics), the final trainable leaves as a pytree (``params``) and per round (1..N) the
    bytes of arrays moved by the train messages (``bytes``) and by the evaluate messages
    (``evaluate_bytes``)."""

    result: object
    params: object
    bytes: Dict[int, RoundBytes] = field(default_factory=dict)
    evaluate_bytes: Dict[int, RoundBytes] = field(default_factory=dict)
    replies: Dict[int, List[Message]] = field(default_factory=dict)
    #: per round, the train replies refused before aggregation: (node id, why)
    dropped: Dict[int, List[tuple]] = field(default_factory=dict)


class CountingGrid(Grid):
    """A Grid that forwards to ``grid`` and counts the array bytes of each exchange (train
    exchanges are the rounds, in order); with ``keep_replies`` it keeps the train replies.

    Given ``like`` (the trainable leaves), every train reply is checked before the strategy
    sees it: each ArrayRecord must hold exactly the task's arrays by name, with their shapes
    and dtypes, and finite values. A reply that does not is dropped - logged on the
    ``rlxjax.flower`` logger with its node and the array at fault, listed in ``dropped`` -
    and the round goes on with the others, as a node that failed (Flower's strategies
    aggregate the replies they get; ``min_train_nodes`` still applies)."""

    def __init__(self, grid: Grid, keep_replies: bool = False, like=None):
        self._grid = grid
        self.keep_replies = keep_replies
        self.like = like
        self.train: Dict[int, RoundBytes] = {}
        self.evaluate: Dict[int, RoundBytes] = {}
        self.replies: Dict[int, List[Message]] = {}
        self.dropped: Dict[int, List[tuple]] = {}

    def _checked(self, rnd: int, replies: List[Message]) -> List[Message]:
        """``replies`` without those whose arrays are not the task's (logged, kept in
        ``dropped``)."""
        if self.like is None:
            return replies
        kept = []
        for m in replies:
            if not m.has_error():
                node = m.metadata.src_node_id
                try:
                    for name, record in m.content.array_records.items():
                        from_arrays(record, self.like, f"the reply of node {node}",
                                    hint="the node trained another model")
                except ArgumentError as e:
                    LOG.warning("rlxjax.flower: round %d: dropped the train reply of node "
                                "%s before aggregation: %s", rnd, node, e)
                    self.dropped.setdefault(rnd, []).append((node, str(e)))
                    continue
            kept.append(m)
        return kept

    # -- counting ----------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: Optional[float] = None) -> Iterable[Message]:
        messages = list(messages)
        kind = messages[0].metadata.message_type.split(".")[0] if messages else None
        sent = sum(record_bytes(r) for m in messages for r in m.content.array_records.values())
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        got = sum(record_bytes(r) for m in replies if not m.has_error()
                  for r in m.content.array_records.values())
        if kind == MessageType.TRAIN:
            rnd = len(self.train) + 1
            self.train[rnd] = RoundBytes(sent, got, len(replies))
            replies = self._checked(rnd, replies)
            if self.keep_replies:
                self.replies[rnd] = replies
        elif kind == MessageType.EVALUATE:
            rnd = len(self.train)
            self.evaluate[rnd] = RoundBytes(sent, got, len(replies))
        return replies

    # -- the rest of the Grid API, forwarded -------------------------------------------
    def set_run(self, run):
        return self._grid.set_run(run)

    @property
    def run(self):
        return self._grid.run

    def create_message(self, *args, **kwargs):
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self):
        return self._grid.get_node_ids()

    def get_nodes(self):
        return self._grid.get_nodes()

    def push_messages(self, messages):
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids):
        return self._grid.pull_messages(message_ids)


def run_strategy(task: Task, strategy: Strategy, grid: Grid, *, num_rounds: int,
                 train_config: Optional[dict] = None, evaluate_config: Optional[dict] = None,
                 evaluate_fn: Optional[Callable] = None, timeout: float = 3600,
                 keep_replies: bool = False) -> FederatedResult:
    """Run ``strategy.start`` on ``grid`` from the task's initial trainable leaves (the body
    of ``server_app``'s main, for a ServerApp of your own)."""
    if not isinstance(strategy, Strategy):
        raise ArgumentError(f"strategy is {type(strategy).__name__}: pass a Flower strategy "
                            "(flwr.serverapp.strategy.FedAvg(...), ...)")
    like = task.initial_state().params
    counting = CountingGrid(grid, keep_replies=keep_replies, like=like)
    result = strategy.start(grid=counting, initial_arrays=to_arrays(like),
                            num_rounds=num_rounds, timeout=timeout,
                            train_config=ConfigRecord(dict(train_config or {})),
                            evaluate_config=ConfigRecord(dict(evaluate_config or {})),
                            evaluate_fn=evaluate_fn)
    final = result.arrays if result.arrays is not None and len(result.arrays) else None
    params = like if final is None else from_arrays(final, like, "the aggregated arrays")
    return FederatedResult(result, params, counting.train, counting.evaluate,
                           counting.replies, counting.dropped)


def server_app(task: Task, strategy: Union[Strategy, Callable[[Context], Strategy]], *,
               num_rounds: int, train_config: Optional[dict] = None,
               evaluate_config: Optional[dict] = None, evaluate_fn: Optional[Callable] = None,
               on_result: Optional[Callable[[FederatedResult], None]] = None,
               keep_replies: bool = False) -> ServerApp:
    """A Flower ``ServerApp`` running ``strategy`` (a Flower strategy, or a function of the
    ServerApp's Context returning one) for ``num_rounds`` rounds from ``task``'s initial
    trainable leaves. ``train_config`` goes to the nodes each round (``local-steps``,
    ``local-epochs``); ``evaluate_fn(round, arrays)`` is Flower's server-side evaluation;
    ``on_result`` receives the ``FederatedResult`` when the run ends."""
    if not isinstance(num_rounds, int) or num_rounds < 1:
        raise ArgumentError(f"num_rounds={num_rounds!r}: a positive int")
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        chosen = strategy if isinstance(strategy, Strategy) else strategy(context)
        out = run_strategy(task, chosen, grid, num_rounds=num_rounds,
                           train_config=train_config, evaluate_config=evaluate_config,
                           evaluate_fn=evaluate_fn, keep_replies=keep_replies)
        if on_result is not None:
            on_result(out)

    return app
