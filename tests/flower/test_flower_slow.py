"""rlxjax.flower on Flower's engines (slow: Ray starts in ~20 s, actors import JAX):
the done-when federation on the Simulation Engine against plain JAX + optax, and SecAgg+."""
import os

import numpy as np
import pytest

from helpers import skip_module_without  # noqa: E402

skip_module_without("flwr", "ray", "flwr_datasets", "sklearn")

import jax  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

import rlxjax  # noqa: E402
from rlxjax.flower import (NodeData, Task, client_app, partition_of,  # noqa: E402
                           secaggplus_server_app, server_app)

import fed_digits as fd  # noqa: E402
from test_flower import _assert_close_trees, _run  # noqa: E402

pytestmark = pytest.mark.slow
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
N, ROUNDS, LOCAL = 4, 3, 5


@pytest.fixture(scope="module", autouse=True)
def actors_import_the_tests():
    # the ClientApp is pickled to Ray actors, which import this folder's modules by name
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE), ROOT,
                                                os.path.join(ROOT, "examples", "flower")] +
                                               ([old] if old else []))
    yield
    if old is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = old


def _simulate(server, client, n):
    # imported here: Flower's simulation (Ray) takes seconds to import, which every xdist
    # worker would pay collecting this -m slow module in the default run
    from flwr.simulation import run_simulation

    run_simulation(server, client, num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2}})


def test_simulation_engine_fedavg_lora_int8_base_equals_jax_reference():
    """The done-when: 4 simulated devices x 3 rounds of FedAvg over LoRA adapters on an
    int8 base, on non-IID digits, equal plain JAX + optax FedAvg on the same partitions with
    the same local steps (the dequantised base: what the program computes with)."""
    batches = fd.node_batches(N)
    tree = fd.initial_tree()
    task = Task(lambda: rlxjax.coreml_train_step(
        fd.loss, fd.optimizer(), trainable=rlxjax.lora.TRAINABLE, compress="int8"),
        tree, evaluate=fd.accuracy)
    results = []
    server = server_app(task, FedAvg(min_available_nodes=N, min_train_nodes=N,
                                     min_evaluate_nodes=N),
                        num_rounds=ROUNDS, train_config={"local-steps": LOCAL},
                        on_result=results.append)
    client = client_app(task, lambda ctx: NodeData(batches[partition_of(ctx)[0]]))
    _simulate(server, client, N)
    (out,) = results
    base = task.runtime().step.frozen_params()["base"]
    history, _ = fd.reference_fedavg(base, tree["lora"], fd.optimizer(), batches,
                                     rounds=ROUNDS, local_steps=LOCAL)
    _assert_close_trees(out.params["lora"], history[-1])
    assert sorted(out.bytes) == [1, 2, 3] and all(b.nodes == N for b in out.bytes.values())
    assert set(out.result.evaluate_metrics_clientapp) == {1, 2, 3}


def test_secaggplus_aggregate_equals_fedavg_up_to_quantisation():
    """Flower's SecAgg+ workflow (4 nodes, 3 shares, threshold 2) with the rlxjax client and
    ``secaggplus_mod``: one round's masked aggregate equals Flower's plain FedAvg of the same
    client's updates within SecAgg+'s quantisation bound, and JAX + optax FedAvg."""
    batches = fd.node_batches(N)
    tree = fd.initial_tree()
    task = Task(lambda: rlxjax.coreml_train_step(
        fd.loss, fd.optimizer(), trainable=rlxjax.lora.TRAINABLE), tree)
    clipping, levels, max_weight = 8.0, 2 ** 22, 100.0
    results = []
    server = secaggplus_server_app(task, num_rounds=1, num_nodes=N, num_shares=3,
                                   reconstruction_threshold=2,
                                   train_config={"local-steps": LOCAL},
                                   clipping_range=clipping, quantization_range=levels,
                                   max_weight=max_weight, on_result=results.append)
    client = client_app(task, lambda ctx: NodeData(batches[partition_of(ctx)[0]]),
                        mods=[secaggplus_mod])
    _simulate(server, client, N)
    (got,) = results
    # the same nodes without SecAgg+: Flower's FedAvg of the same client's updates
    plain, _ = _run(task, batches, FedAvg(fraction_evaluate=0.0, min_available_nodes=N,
                                          min_train_nodes=N), rounds=1)
    # each node's weighted values are stochastically rounded to 2 * clipping / levels
    weights = N * (LOCAL * fd.BATCH / max_weight)
    bound = N * 2 * clipping / levels / weights          # 4.8e-6 here
    diffs = [float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(jax.tree_util.tree_leaves(got["lora"]),
                             jax.tree_util.tree_leaves(plain.params["lora"]))]
    assert 0 < max(diffs) <= bound, (diffs, bound)
    # and both are FedAvg as plain JAX + optax computes it
    history, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches,
                                     rounds=1, local_steps=LOCAL)
    _assert_close_trees(got["lora"], history[-1])
