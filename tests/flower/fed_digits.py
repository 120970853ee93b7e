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

BATCH = 16
HIDDEN = 32
RANK = 4


def mlp(params, x):
    h = jnp.tanh(x @ params["l1"]["kernel"] + params["l1"]["bias"])
    return h @ params["l2"]["kernel"] + params["l2"]["bias"]


def loss(tree, x, y):
    logits = mlp(rlxjax.lora.merge(tree), x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def accuracy(tree, x, y):
    logits = mlp(rlxjax.lora.merge(tree), x)
    return {"loss": -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1)),
            "accuracy": jnp.mean((jnp.argmax(logits, -1) == jnp.argmax(y, -1))
                                 .astype(jnp.float32))}


def initial_tree(seed=0):
    rng = np.random.default_rng(seed)
    base = {"l1": {"kernel": (rng.normal(size=(64, HIDDEN)) / 8.0).astype(np.float32),
                   "bias": np.zeros(HIDDEN, np.float32)},
            "l2": {"kernel": (rng.normal(size=(HIDDEN, 10)) / 6.0).astype(np.float32),
                   "bias": np.zeros(10, np.float32)}}
    tree = rlxjax.lora.add_adapters(base, rank=RANK, key=jax.random.key(seed))
    return jax.tree_util.tree_map(np.asarray, tree)


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def node_batches(num_nodes, max_batches=4, alpha=0.5, seed=42):
    """Per node: a list of (x, one-hot y) batches of its Dirichlet partition."""
    from rlxjax.flower import dirichlet_partitions

    x, y = digits()
    parts = dirichlet_partitions(y, num_nodes, alpha=alpha, seed=seed,
                                 min_partition_size=BATCH * 2)
    out = []
    for idx in parts:
        nb = min(max_batches, len(idx) // BATCH)
        out.append([(x[idx[i * BATCH:(i + 1) * BATCH]],
                     np.eye(10, dtype=np.float32)[y[idx[i * BATCH:(i + 1) * BATCH]]])
                    for i in range(nb)])
    return out


def optimizer():
    return optax.sgd(0.5, momentum=0.9)


def reference_fedavg(base, lora, opt, batches, *, rounds, local_steps, reset=False,
                     clip=None):
    """Plain JAX + optax FedAvg: every round each node starts from the global adapters,
    takes ``local_steps`` steps on its batches (batch ``step % n``) with its own optimizer
    state kept from the previous round, and the global adapters become the mean weighted by
    examples seen (``reset``: each round from ``opt.init``; ``clip``: each node's update
    scaled to L2 norm <= clip over all leaves, as Flower's fixedclipping_mod does). Returns
    (global adapters after each round, each node's optimizer state at the end)."""
    grad = jax.jit(jax.grad(lambda l, x, y: loss({"base": base, "lora": l}, x, y)))
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
            weights.append(local_steps * BATCH)
        w = np.asarray(weights, np.float64) / np.sum(weights)
        glob = jax.tree_util.tree_map(
            lambda *xs: np.sum([wi * np.asarray(x, np.float64) for wi, x in zip(w, xs)],
                               axis=0).astype(np.float32), *news)
        history.append(glob)
    return history, states
