"""The model, its LoRA adapters, the compiled train step and each node's data."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlxjax
from rlxjax.flower import NodeData, Task, dirichlet_partitions, partition_of

BATCH, HIDDEN, RANK = 16, 32, 4


def mlp(params, x):
    h = jnp.tanh(x @ params["l1"]["kernel"] + params["l1"]["bias"])
    return h @ params["l2"]["kernel"] + params["l2"]["bias"]


def loss(tree, x, y):
    logits = mlp(rlxjax.lora.merge(tree), x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def metrics(tree, x, y):
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
    return rlxjax.lora.add_adapters(base, rank=RANK, key=jax.random.key(seed))


def make_step():
    # the program a phone ships: adapters trained, the base frozen in it as int8 weights
    return rlxjax.coreml_train_step(loss, optax.sgd(0.5, momentum=0.9),
                                    trainable=rlxjax.lora.TRAINABLE, compress="int8")


TASK = Task(make_step, initial_tree(), evaluate=metrics)


def node_data(context) -> NodeData:
    """This node's partition of scikit-learn's digits (label-skewed, Dirichlet 0.5)."""
    from sklearn.datasets import load_digits

    pid, n = partition_of(context)
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target
    idx = dirichlet_partitions(y, n, alpha=0.5, seed=42, min_partition_size=3 * BATCH)[pid]
    cut = (len(idx) * 4 // 5) // BATCH * BATCH
    one_hot = np.eye(10, dtype=np.float32)

    def batches(ix):
        return [(x[ix[i:i + BATCH]], one_hot[y[ix[i:i + BATCH]]])
                for i in range(0, len(ix) - BATCH + 1, BATCH)]

    return NodeData(train=batches(idx[:cut]), test=batches(idx[cut:]))
