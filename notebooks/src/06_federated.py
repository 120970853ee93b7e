"""Source of notebooks/06_federated.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # Federated fine-tuning: 8 phones, one model, no data leaves a phone
#
# Each phone fine-tunes the LoRA adapters of a small pretrained model on its own data
# through the compiled train step (the program an app ships, its frozen base stored int8),
# and a Flower server averages the adapters (FedAvg). Flower's Simulation Engine runs the 8
# phones on this machine (`flwr.simulation.run_simulation`); each phone's data is a
# label-skewed (non-IID) part of scikit-learn's digits, split by flwr-datasets'
# `DirichletPartitioner`. Per round: the global model's accuracy on held-out digits for
# FedAvg, against each phone training alone and against centralised training on the pooled
# data, and the bytes the round moved. Needs `pip install "rlxjax[flower]"`.

# %%
import logging
import jax, jax.numpy as jnp, numpy as np, optax
import matplotlib.pyplot as plt
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
import rlxjax
from rlxjax.flower import (NodeData, Task, client_app, dirichlet_partitions, from_arrays,
                           partition_of, server_app)

logging.getLogger("flwr").setLevel(logging.WARNING)  # Flower logs every round at INFO

# %% [markdown]
# ## Data: digits, split across 8 phones by label skew
#
# 20 % of the digits are held out for the global accuracy. The rest is split into 8
# partitions with Dirichlet(0.3) class proportions: most phones see a few digits often and
# the others rarely or never.

# %%
from sklearn.datasets import load_digits

PHONES, BATCH, ROUNDS, LOCAL = 8, 16, 6, 6
d = load_digits()
x_all, y_all = (d.data / 16.0).astype(np.float32), d.target
order = np.random.default_rng(0).permutation(len(y_all))
test, train = order[:360], order[360:]
one_hot = np.eye(10, dtype=np.float32)
parts = dirichlet_partitions(y_all[train], PHONES, alpha=0.3, seed=7,
                             min_partition_size=2 * BATCH)
phone_idx = [train[p] for p in parts]


def batches(ix):
    return [(x_all[ix[i:i + BATCH]], one_hot[y_all[ix[i:i + BATCH]]])
            for i in range(0, len(ix) - BATCH + 1, BATCH)]


phone_batches = [batches(ix) for ix in phone_idx]
fig, ax = plt.subplots(figsize=(7, 2.6))
counts = np.array([np.bincount(y_all[ix], minlength=10) for ix in phone_idx])
ax.imshow(counts.T, aspect="auto", cmap="Blues")
ax.set_xlabel("phone"); ax.set_ylabel("digit"); ax.set_title("examples per digit per phone")
plt.show()
print("examples per phone:", [len(ix) for ix in phone_idx])

# %% [markdown]
# ## The pretrained model
#
# An MLP (64 → 32 → 10) pretrained in JAX + optax on the digits 0-4 only (what the app
# shipped with); the phones' data has all ten. LoRA adapters of rank 4 on both kernels are
# what the phones train; the base stays frozen in the package as int8 weights.

# %%
def mlp(params, x):
    h = jnp.tanh(x @ params["l1"]["kernel"] + params["l1"]["bias"])
    return h @ params["l2"]["kernel"] + params["l2"]["bias"]


def xent(logits, y):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


rng = np.random.default_rng(0)
base = {"l1": {"kernel": (rng.normal(size=(64, 32)) / 8).astype(np.float32),
               "bias": np.zeros(32, np.float32)},
        "l2": {"kernel": (rng.normal(size=(32, 10)) / 6).astype(np.float32),
               "bias": np.zeros(10, np.float32)}}
pre = train[y_all[train] < 5]
opt = optax.adam(1e-2)
pre_state = opt.init(base)
pre_grad = jax.jit(jax.value_and_grad(lambda p, x, y: xent(mlp(p, x), y)))
for i in range(300):
    j = pre[(i * 64) % (len(pre) - 64):][:64]
    _, g = pre_grad(base, x_all[j], one_hot[y_all[j]])
    u, pre_state = opt.update(g, pre_state, base)
    base = optax.apply_updates(base, u)
base = jax.tree_util.tree_map(np.asarray, base)


def accuracy(params, ix=test):
    return float(np.mean(np.argmax(mlp(params, x_all[ix]), -1) == y_all[ix]))


print(f"pretrained accuracy: digits 0-4 {accuracy(base, test[y_all[test] < 5]):.3f}, "
      f"all digits {accuracy(base):.3f}")

# %% [markdown]
# ## The task every phone and the server share
#
# `make_step` builds the compiled step with the adapters trainable and the base frozen and
# int8-compressed (`trainable=rlxjax.lora.TRAINABLE, compress="int8"`); only the adapters
# travel.

# %%
tree = rlxjax.lora.add_adapters(base, rank=4, key=jax.random.key(0))


def loss(t, x, y):
    return xent(mlp(rlxjax.lora.merge(t), x), y)


def make_step():
    return rlxjax.coreml_train_step(loss, optax.sgd(0.2, momentum=0.5),
                                    trainable=rlxjax.lora.TRAINABLE, compress="int8")


task = Task(make_step, tree)
like = task.initial_state().params
frozen = task.runtime().step.frozen_params()          # the base as the program computes


def global_accuracy(trainable):
    full = jax.tree_util.tree_map(lambda f, t: t if f is None else f, frozen,
                                  task.runtime().full_params(trainable),
                                  is_leaf=lambda v: v is None)
    return accuracy(rlxjax.lora.merge(full))


print("trainable arrays:", task.runtime().names)

# %% [markdown]
# ## FedAvg on Flower's Simulation Engine
#
# Each round every phone takes `LOCAL` steps on its own batches, keeping its optimizer state
# (the momentum trace) on the phone between rounds (its Flower `Context.state`); the server
# evaluates the global adapters on the held-out digits after each round (Flower's
# `evaluate_fn`).

# %%
fed_acc, results = {}, []


def evaluate_fn(rnd, arrays):
    from flwr.app import MetricRecord

    fed_acc[rnd] = global_accuracy(from_arrays(arrays, like))
    return MetricRecord({"accuracy": fed_acc[rnd]})


server = server_app(task, FedAvg(fraction_evaluate=0.0, min_available_nodes=PHONES,
                                 min_train_nodes=PHONES),
                    num_rounds=ROUNDS, train_config={"local-steps": LOCAL},
                    evaluate_fn=evaluate_fn, on_result=results.append)
client = client_app(task, lambda ctx: NodeData(phone_batches[partition_of(ctx)[0]]))
run_simulation(server, client, num_supernodes=PHONES,
               backend_config={"client_resources": {"num_cpus": 1},
                               "init_args": {"num_cpus": 2, "logging_level": "error"}})
fed = results[0]
print("FedAvg accuracy per round:", {r: round(a, 3) for r, a in fed_acc.items()})

# %% [markdown]
# ## Each phone alone, and centralised training
#
# The same compiled step, without federation: each phone trains on its own data for the
# same number of steps (`LOCAL` per round); centralised training runs `PHONES * LOCAL` steps
# per round over the pooled batches (the data FedAvg saw, in one place).

# %%
step = task.runtime().step


def train_alone(bs, steps_per_round):
    st, accs = step.init(tree), [global_accuracy(like)]
    for r in range(ROUNDS):
        for i in range(steps_per_round):
            st, _ = step(st, *bs[(r * steps_per_round + i) % len(bs)])
        accs.append(global_accuracy(st.params))
    return accs


alone = np.array([train_alone(bs, LOCAL) for bs in phone_batches])
pooled = [b for i in range(max(map(len, phone_batches))) for bs in phone_batches
          if i < len(bs) for b in [bs[i]]]
central = train_alone(pooled, PHONES * LOCAL)
print("each phone alone, final accuracy:", np.round(alone[:, -1], 3))
print("centralised, final accuracy:", round(central[-1], 3))

# %% [markdown]
# ## Accuracy per round, and what each round sent

# %%
rounds = np.arange(ROUNDS + 1)
per_round = [fed.bytes[r].total for r in range(1, ROUNDS + 1)]
whole = sum(np.asarray(v).nbytes for v in jax.tree_util.tree_leaves(base)) * 2 * PHONES
fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
a1.plot(rounds, [fed_acc[r] for r in rounds], "o-", label="FedAvg (8 phones)")
a1.plot(rounds, central, "s--", label="centralised (pooled data)")
a1.plot(rounds, alone.mean(0), "^:", label="each phone alone (mean)")
a1.fill_between(rounds, alone.min(0), alone.max(0), alpha=0.15, color="C2")
a1.set_xlabel("round"); a1.set_ylabel("accuracy on held-out digits"); a1.legend()
a2.bar(rounds[1:] - 0.2, np.array(per_round) / 1e3, 0.4, label="adapters (sent + received)")
a2.bar(rounds[1:] + 0.2, [whole / 1e3] * ROUNDS, 0.4, label="the base, fp32 (if it were sent)")
a2.set_xlabel("round"); a2.set_ylabel("kB per round"); a2.legend()
plt.tight_layout(); plt.show()
print(f"bytes per round: {per_round[0]} (8 phones x 2 directions x "
      f"{per_round[0] // (2 * PHONES)} bytes of adapters); sending the fp32 base would be "
      f"{whole}")
