"""``Task``: what the server and every node of a federation share.

A Task names how to make the compiled train step (``make_step``: any
``rlxjax.coreml_train_step``, in any format, state mode, ``trainable=`` / ``compress=``),
the initial parameters (the whole tree, frozen base included) and, optionally, the function
a node evaluates on its held-out data. Flower ships the ClientApp to its nodes (Ray actors in
simulation, SuperNode processes in deployment), so a Task is pickled; each process builds
the step once, on first use, and keeps it (``Task.runtime``), as an app loads its package
once. The server only needs the initial trainable leaves (``Task.initial_state``).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from flwr.app import Context

from ..errors import ArgumentError
from ..training.params_io import leaf_names
from ..training.state import TrainState

# per process: Task.key -> _Runtime (the compiled step and its initial state)
_RUNTIMES: Dict[str, "_Runtime"] = {}


@dataclass
class NodeData:
    """One node's data: ``train`` batches (tuples of arrays, the loss's batch arguments,
    all of one shape: the step is compiled for it) and optional held-out ``test`` batches."""

    train: Sequence[Tuple[np.ndarray, ...]]
    test: Optional[Sequence[Tuple[np.ndarray, ...]]] = None

    def __post_init__(self):
        self.train = [b if isinstance(b, tuple) else (b,) for b in self.train]
        if self.test is not None:
            self.test = [b if isinstance(b, tuple) else (b,) for b in self.test]
        if not self.train:
            raise ArgumentError("NodeData needs at least one train batch")


def batch_size(batch) -> int:
    """The examples in a batch: the leading axis of its first array."""
    return int(np.shape(batch[0])[0]) if np.ndim(batch[0]) else 1


def partition_of(context: Context) -> Tuple[int, int]:
    """(partition id, number of partitions) of a node: the ``partition-id`` and
    ``num-partitions`` of its node config (set by the Simulation Engine, and by
    ``flower-supernode --node-config`` in deployment)."""
    cfg = context.node_config
    if "partition-id" not in cfg or "num-partitions" not in cfg:
        raise ArgumentError("this node has no 'partition-id' / 'num-partitions' in its node "
                            "config: start the SuperNode with --node-config "
                            "\"partition-id=0 num-partitions=2\"")
    return int(cfg["partition-id"]), int(cfg["num-partitions"])


class Task:
    """What the server and every node share (pickled to each node with the ClientApp).

    ``make_step()`` returns the train step (``rlxjax.coreml_train_step(...)``); ``params``
    is the whole initial parameter tree ``step.init`` takes (with ``trainable=`` only the
    trainable leaves travel, the frozen base stays in each node's program).
    ``evaluate(params, *batch)`` (default: the step's loss) returns a scalar or a dict of
    scalars; a node compiles it with ``rlxjax.coreml_jit`` in the step's format and backend
    and runs it on its held-out batches, ``params`` being the whole tree
    (``step.params(state)``)."""

    def __init__(self, make_step: Callable[[], object], params, *,
                 evaluate: Optional[Callable] = None):
        if not callable(make_step):
            raise ArgumentError("Task(make_step, params): make_step is a function returning "
                                "the train step (rlxjax.coreml_train_step(...))")
        self.make_step = make_step
        self.params = params
        self.evaluate = evaluate
        self.key = uuid.uuid4().hex  # the same in every process the Task is pickled to

    def runtime(self) -> "_Runtime":
        """This process's step and initial state (built on first use)."""
        rt = _RUNTIMES.get(self.key)
        if rt is None:
            rt = _RUNTIMES[self.key] = _Runtime(self)
        return rt

    def initial_state(self) -> TrainState:
        """The step's initial TrainState: its ``params`` are the trainable leaves the
        server starts from."""
        return self.runtime().init


class _Runtime:
    """A Task's step in this process, its initial state and the evaluation program."""

    def __init__(self, task: Task):
        from ..training.step import TrainStep

        step = task.make_step()
        if not isinstance(step, TrainStep):
            raise ArgumentError(f"Task.make_step returned {type(step).__name__}, not a "
                                "train step (rlxjax.coreml_train_step(...))")
        self.step = step
        self.init = step.init(task.params)
        self.names: List[str] = leaf_names(self.init.params)[0]
        self._task = task
        self._evaluate = None

    def evaluate_fn(self):
        """``task.evaluate`` (or the loss) compiled in the step's format and backend."""
        if self._evaluate is None:
            from ..api import coreml_jit

            fn = self._task.evaluate or self.step.loss
            self._evaluate = coreml_jit(fn, backend=self.step.backend,
                                        format=self.step.format_name)
        return self._evaluate

    def full_params(self, trainable):
        """The whole parameter tree for the trainable leaves (the frozen base as the
        program computes with it)."""
        return self.step.params(TrainState(trainable, None, 0))
