"""The federated task the Flower tests share: LoRA adapters of a small MLP on
scikit-learn's digits (8x8 images, shipped inside the scikit-learn wheel: no download),
split across nodes by flwr-datasets' DirichletPartitioner, and the plain JAX + optax
reference of the same federated algorithm (FedAvg, each node keeping its optimizer state)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlxjax

# the model, its loss and metrics are the example App's (examples/flower/rlxjax_digits/),
# read from it on first use: importing the App's module builds its TASK (an XLA compile),
# which every pytest worker would otherwise pay while collecting the Flower tests
_FROM_TASK = {"BATCH": "BATCH", "HIDDEN": "HIDDEN", "RANK": "RANK", "loss": "loss",
              "mlp": "mlp", "accuracy": "metrics"}


def _task():
    import rlxjax_digits.task

    return rlxjax_digits.task


def __getattr__(name):
    if name in _FROM_TASK:
        return getattr(_task(), _FROM_TASK[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def initial_tree(seed=0):
    return jax.tree_util.tree_map(np.asarray, _task().initial_tree(seed))


def mse_loss(tree, x, y):
    """A squared-error loss (what Core AI's first slice lowers: no log_softmax yet)."""
    return jnp.mean((_task().mlp(rlxjax.lora.merge(tree), x) - y) ** 2)


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def node_batches(num_nodes, max_batches=4, alpha=0.5, seed=42):
    """Per node: a list of (x, one-hot y) batches of its Dirichlet partition."""
    from rlxjax.flower import dirichlet_partitions

    x, y = digits()
    batch = _task().BATCH
    parts = dirichlet_partitions(y, num_nodes, alpha=alpha, seed=seed,
                                 min_partition_size=batch * 2)
    out = []
    for idx in parts:
        nb = min(max_batches, len(idx) // batch)
        out.append([(x[idx[i * batch:(i + 1) * batch]],
                     np.eye(10, dtype=np.float32)[y[idx[i * batch:(i + 1) * batch]]])
                    for i in range(nb)])
    return out


def optimizer():
    return optax.sgd(0.5, momentum=0.9)


def reference_fedavg(base, lora, opt, batches, *, rounds, local_steps, reset=False,
                     clip=None, loss_fn=None):
    """Plain JAX + optax FedAvg: every round each node starts from the global adapters,
    takes ``local_steps`` steps on its batches (batch ``step % n``) with its own optimizer
    state kept from the previous round, and the global adapters become the mean weighted by
    examples seen (``reset``: each round from ``opt.init``; ``clip``: each node's update
    scaled to L2 norm <= clip over all leaves, as Flower's fixedclipping_mod does). Returns
    (global adapters after each round, each node's optimizer state at the end)."""
    loss_fn = _task().loss if loss_fn is None else loss_fn
    grad = jax.jit(jax.grad(lambda l, x, y: loss_fn({"base": base, "lora": l}, x, y)))
    states = [opt.init(lora) for _ in batches]
    steps = [0] * len(batches)
    glob, history = lora, []
    for _ in range(rounds):
        news, weights = [], []
        for k, bk in enumerate(batches):
            p, s = glob, (opt.init(glob) if reset else states[k])
            for _ in range(local_steps):
                x, y = bk[steps[k] % len(bk)]
                u, s = opt.update(grad(p, x, y), s, p)
                p = optax.apply_updates(p, u)
                steps[k] += 1
            states[k] = s
            if clip is not None:
                d = jax.tree_util.tree_map(lambda a, b: np.asarray(a, np.float64) - b, p, glob)
                norm = np.sqrt(sum(np.sum(x ** 2) for x in jax.tree_util.tree_leaves(d)))
                f = min(1.0, clip / norm)
                p = jax.tree_util.tree_map(lambda g, x: (g + f * x).astype(np.float32), glob, d)
            news.append(p)
            weights.append(local_steps * _task().BATCH)
        w = np.asarray(weights, np.float64) / np.sum(weights)
        glob = jax.tree_util.tree_map(
            lambda *xs: np.sum([wi * np.asarray(x, np.float64) for wi, x in zip(w, xs)],
                               axis=0).astype(np.float32), *news)
        history.append(glob)
    return history, states
