"""rlxjax.flower in the default suite: FedAvg over LoRA adapters through the compiled step,
against plain JAX + optax; each node's optimizer state kept in its Context.state; bytes per
round; Flower's client-side fixed-clipping DP; clear errors. The federations run through an
in-process Grid (inprocess.py); test_flower_slow.py runs them on Flower's Simulation and
Deployment Engines."""
import numpy as np
import pytest

from helpers import skip_module_without  # noqa: E402

skip_module_without("flwr", "flwr_datasets", "sklearn")

import jax  # noqa: E402
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.clientapp.mod import fixedclipping_mod  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyClientSideFixedClipping, FedAvg)

import rlxjax  # noqa: E402
from rlxjax.flower import NodeData, Task, client_app, partition_of, record_bytes  # noqa: E402
from rlxjax.flower.arrays import OPT_STATE  # noqa: E402
from rlxjax.flower.server import run_strategy  # noqa: E402

import fed_digits as fd  # noqa: E402
from inprocess import InProcessGrid  # noqa: E402

N, ROUNDS, LOCAL = 4, 3, 5


@pytest.fixture(scope="module")
def batches():
    return fd.node_batches(N)


def _task(compress=None):
    return Task(lambda: rlxjax.coreml_train_step(
        fd.loss, fd.optimizer(), trainable=rlxjax.lora.TRAINABLE, compress=compress),
        fd.initial_tree(), evaluate=fd.accuracy)


def _fedavg(n=N):
    return FedAvg(min_available_nodes=n, min_train_nodes=n, min_evaluate_nodes=n)


def _run(task, batches, strategy, *, rounds=ROUNDS, mods=None, **kw):
    app = client_app(task, lambda ctx: NodeData(batches[partition_of(ctx)[0]]),
                     local_steps=LOCAL, mods=mods, **kw)
    grid = InProcessGrid(app, len(batches))
    return run_strategy(task, strategy, grid, num_rounds=rounds, keep_replies=True), grid


def _assert_close_trees(got, want, rtol=1e-4):
    """Each leaf within ``rtol`` of the reference, relative to the leaf's scale: per
    element |a - b| <= rtol * (|b| + max |b|), and the leaf's L2 error <= rtol * its norm
    (fp32 evaluation order differs, so an element near zero is compared at its leaf's
    scale, not its own)."""
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0],
                            jax.tree_util.tree_leaves(want)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = float(np.max(np.abs(b)))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale,
                                   err_msg=jax.tree_util.keystr(path))
        assert np.linalg.norm(a - b) <= rtol * np.linalg.norm(b), jax.tree_util.keystr(path)


def test_fedavg_lora_equals_jax_optax_reference(batches):
    task = _task()
    out, grid = _run(task, batches, _fedavg())
    tree = fd.initial_tree()
    history, states = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches,
                                          rounds=ROUNDS, local_steps=LOCAL)
    names = task.runtime().names                 # only the adapters were federated
    assert names and all(n.startswith("lora/") for n in names), names
    _assert_close_trees(out.params["lora"], history[-1])
    # each node's momentum trace stayed on the node, in its Context.state, across rounds
    for i, ctx in enumerate(grid.contexts.values()):
        kept = ctx.state.array_records[OPT_STATE]
        want = jax.tree_util.tree_leaves(states[i])
        assert len(kept) == len(want)
        _assert_close_trees([kept[str(j)].numpy() for j in range(len(want))], want)
        assert ctx.state.config_records["rlxjax.flower.node"]["step"] == ROUNDS * LOCAL
    # Flower's own evaluation ran the compiled accuracy on every node each round
    assert set(out.result.evaluate_metrics_clientapp) == {1, 2, 3}
    assert 0.0 <= out.result.evaluate_metrics_clientapp[3]["accuracy"] <= 1.0


def test_bytes_per_round_are_the_adapters_only(batches):
    task = _task(compress="int8")
    out, _ = _run(task, batches, _fedavg(), rounds=1)
    like = task.initial_state().params
    payload = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(like))
    base = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(fd.initial_tree()["base"]))
    sent = out.bytes[1]
    per_node = record_bytes(rlxjax.flower.to_arrays(like))
    assert sent.nodes == N and sent.sent == N * per_node and sent.received == N * per_node
    # .npy headers aside, a message holds the adapters' values and nothing of the base
    assert payload < per_node <= payload + 128 * len(jax.tree_util.tree_leaves(like))
    assert per_node < base / 2


def test_optimizer_state_reset_policy(batches):
    out, grid = _run(_task(), batches[:2], _fedavg(2), rounds=2, optimizer_state="reset")
    tree = fd.initial_tree()
    history, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches[:2],
                                     rounds=2, local_steps=LOCAL, reset=True)
    _assert_close_trees(out.params["lora"], history[-1])
    kept, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches[:2],
                                  rounds=2, local_steps=LOCAL)
    diff = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(
        jax.tree_util.tree_leaves(out.params["lora"]), jax.tree_util.tree_leaves(kept[-1])))
    assert diff > 1e-3  # keeping the momentum between rounds is a different algorithm


def test_mlstate_step_keeps_its_optimizer_state_across_rounds(batches):
    """state="mlstate": the step keeps params + optimizer state in Core ML states; the node
    writes the global adapters and its kept optimizer state into a fresh device state each
    round and reads them back after its local steps."""
    task = Task(lambda: rlxjax.coreml_train_step(
        fd.loss, fd.optimizer(), state="mlstate", trainable=rlxjax.lora.TRAINABLE),
        fd.initial_tree())
    out, _ = _run(task, batches[:2], FedAvg(fraction_evaluate=0.0, min_available_nodes=2,
                                            min_train_nodes=2), rounds=2)
    tree = fd.initial_tree()
    history, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches[:2],
                                     rounds=2, local_steps=LOCAL)
    _assert_close_trees(out.params["lora"], history[-1])


def test_dp_client_side_fixed_clipping(batches):
    clip = 0.05
    strategy = DifferentialPrivacyClientSideFixedClipping(
        _fedavg(), noise_multiplier=0.0, clipping_norm=clip, num_sampled_clients=N)
    out, _ = _run(_task(), batches, strategy, rounds=1, mods=[fixedclipping_mod])
    tree = fd.initial_tree()
    glob = rlxjax.flower.to_arrays(_task().initial_state().params)
    norms = []
    for reply in out.replies[1]:
        rec = reply.content.array_records["arrays"]
        norms.append(np.sqrt(sum(np.sum((rec[k].numpy().astype(np.float64) -
                                         glob[k].numpy()) ** 2) for k in rec.keys())))
    np.testing.assert_allclose(norms, clip, rtol=1e-5)  # every update was clipped to 0.05
    history, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches,
                                     rounds=1, local_steps=LOCAL, clip=clip)
    _assert_close_trees(out.params["lora"], history[-1])
    unclipped, _ = fd.reference_fedavg(tree["base"], tree["lora"], fd.optimizer(), batches,
                                       rounds=1, local_steps=LOCAL)
    step_norm = np.sqrt(sum(np.sum((np.asarray(a) - b) ** 2) for a, b in zip(
        jax.tree_util.tree_leaves(unclipped[-1]), jax.tree_util.tree_leaves(tree["lora"]))))
    assert step_norm > 2 * clip  # the clipping did bite


def test_aimodel_client_on_core_ai_runtime(batches):
    """The client's format is the step's: a Core AI (.aimodel) io-mode step, the adapters its
    parameters and the base closed over (constants in the program), 2 nodes x 2 rounds on
    Apple's Core AI runtime, against JAX + optax."""
    pytest.importorskip("coreai.authoring", reason="format='aimodel' needs rlxjax[coreai]")
    tree = fd.initial_tree()
    base = tree["base"]

    def loss(lora, x, y):
        return fd.mse_loss({"base": base, "lora": lora}, x, y)

    task = Task(lambda: rlxjax.coreml_train_step(loss, fd.optimizer(), format="aimodel"),
                tree["lora"])
    assert task.runtime().step.format_name == "aimodel"
    out, _ = _run(task, batches[:2], FedAvg(fraction_evaluate=0.0, min_available_nodes=2,
                                            min_train_nodes=2), rounds=2)
    history, _ = fd.reference_fedavg(base, tree["lora"], fd.optimizer(), batches[:2],
                                     rounds=2, local_steps=LOCAL, loss_fn=fd.mse_loss)
    _assert_close_trees(out.params, history[-1])


def test_wrong_arrays_are_a_clear_error_reply(batches):
    task = _task()
    app = client_app(task, lambda ctx: NodeData(batches[0]), local_steps=1)
    grid = InProcessGrid(app, 1)
    msg = Message(RecordDict({"arrays": ArrayRecord({"lora/x": Array(np.zeros(3, np.float32))}),
                              "config": ConfigRecord({})}), 100, "train")
    reply = grid.send_and_receive([msg])[0]
    assert reply.has_error()
    assert "has no tensor 'lora/l1.kernel/a'" in reply.error.reason


def test_missing_extra_names_the_install_command():
    from rlxjax.flower._flwr import require

    with pytest.raises(rlxjax.BackendUnavailableError, match=r'pip install "rlxjax\[flower\]"'):
        require("no-such-flwr-dist")
