"""SecAgg+ with the rlxjax client: Flower's ``SecAggPlusWorkflow`` and ``secaggplus_mod``.

In Flower 1.42 secure aggregation runs in the legacy workflow (``DefaultWorkflow`` on a
``LegacyContext`` with a ``flwr.server.strategy`` strategy), whose train messages carry the
legacy layout: ``fitins.parameters`` (the arrays as an ordered list, without names) and
``fitins.config``, answered by ``fitres.parameters`` / ``fitres.num_examples`` /
``fitres.metrics``. The rlxjax ClientApp speaks it too (``legacy_train``, chosen when a
message holds ``fitins.parameters``): the list is the trainable leaves in pytree-path order
(``Task.runtime().names``), cast back to the leaves' dtypes (SecAgg+ dequantises the
aggregate in float64). ``secaggplus_server_app`` is the matching ServerApp.

SecAgg+ clips each value to ``[-clipping_range, clipping_range]`` and quantises it to
``quantization_range`` levels (stochastic rounding) before masking: the aggregate equals
FedAvg's up to ``n * 2 * clipping_range / quantization_range / sum(weights)`` per value,
the weights being ``num_examples / max_weight``.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import numpy as np
from flwr.app import Context, Message

from ..errors import ArgumentError
from .task import Task

LEGACY_PARAMS = "fitins.parameters"


def is_legacy(msg: Message) -> bool:
    """True for a train message in Flower's legacy layout (the SecAgg+ workflow's)."""
    return LEGACY_PARAMS in msg.content.array_records


def _tree_from_list(rt, arrays, where: str):
    want, treedef = jax.tree_util.tree_flatten(rt.init.params)
    if len(arrays) != len(want):
        raise ArgumentError(f"{where} holds {len(arrays)} arrays, the step trains "
                            f"{len(want)} ({rt.names[:4]}...)")
    out = []
    for name, got, like in zip(rt.names, arrays, want):
        if np.shape(got) != np.shape(like):
            raise ArgumentError(f"array {len(out)} ('{name}') of {where} has shape "
                                f"{list(np.shape(got))}, the parameter {list(np.shape(like))}")
        out.append(np.asarray(got, dtype=np.asarray(like).dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def legacy_train(node, msg: Message, context: Context) -> Message:
    """The train handler in the legacy layout (``fitins.*`` -> ``fitres.*``)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, \
        parameters_to_ndarrays
    from flwr.compat.common.recorddict_compat import fitres_to_recorddict, \
        recorddict_to_fitins

    rt = node.task.runtime()
    fitins = recorddict_to_fitins(msg.content, keep_input=True)
    trainable = _tree_from_list(rt, parameters_to_ndarrays(fitins.parameters),
                                "the legacy (SecAgg+) message")
    new, metrics = node.fit(trainable, fitins.config, context)
    n = int(metrics.pop("num-examples"))
    fitres = FitRes(status=Status(Code.OK, "OK"),
                    parameters=ndarrays_to_parameters(
                        [np.asarray(x) for x in jax.tree_util.tree_leaves(new)]),
                    num_examples=n, metrics=metrics)
    return Message(fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def secaggplus_server_app(task: Task, *, num_rounds: int, num_nodes: int, num_shares,
                          reconstruction_threshold, train_config: Optional[dict] = None,
                          on_result: Optional[Callable] = None, **workflow_options):
    """A Flower ServerApp that federates ``task`` with FedAvg over Flower's SecAgg+ workflow
    (``SecAggPlusWorkflow(num_shares, reconstruction_threshold, **workflow_options)``:
    ``max_weight``, ``clipping_range``, ``quantization_range``, ``modulus_range``,
    ``timeout``), sampling all ``num_nodes`` nodes each round; the nodes' ClientApp needs
    ``mods=[flwr.client.mod.secaggplus_mod]``. ``on_result(params)`` receives the final
    trainable leaves (a pytree)."""
    from flwr.common import ndarrays_to_parameters
    from flwr.compat.common.recorddict_compat import arrayrecord_to_parameters
    from flwr.common import parameters_to_ndarrays
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_PARAMS_RECORD
    from flwr.serverapp import ServerApp

    config = dict(train_config or {})
    app = ServerApp()

    @app.main()
    def main(grid, context: Context) -> None:
        rt = task.runtime()
        initial = [np.asarray(x) for x in jax.tree_util.tree_leaves(rt.init.params)]
        strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0,
                          min_fit_clients=num_nodes, min_available_clients=num_nodes,
                          initial_parameters=ndarrays_to_parameters(initial),
                          on_fit_config_fn=lambda _round: dict(config))
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=num_rounds),
                               strategy=strategy)
        workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
            num_shares=num_shares, reconstruction_threshold=reconstruction_threshold,
            **workflow_options))
        workflow(grid, legacy)
        final = parameters_to_ndarrays(arrayrecord_to_parameters(
            legacy.state.array_records[MAIN_PARAMS_RECORD], keep_input=True))
        if on_result is not None:
            on_result(_tree_from_list(rt, final, "the SecAgg+ aggregate"))

    return app
