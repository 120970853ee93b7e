"""The package metadata ``rlxjax.random`` names each random input's distribution and
parameters (issue 17, deliverable 2), so an app can fill the input itself.

Oracle: the parameters the user's code passes to ``jax.random`` (as the input's dtype
rounds them), and the host-computed values themselves, which must lie in the stated
support."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from helpers import TEST_BACKEND

F32 = np.float32


def _rows(f, *args):
    compiled = rlxjax.coreml_jit(f, backend=TEST_BACKEND, random="inputs").lower(
        *args).compile()
    rows = json.loads(compiled.spec.description.metadata.userDefined["rlxjax.random"])
    drawn = compiled._traced.host.run(jax.tree_util.tree_leaves(args))[0]
    return {r["made_by"].rsplit(".", 1)[-1] + ("*" if r["name"][-2:] == "_1" else ""):
            (r, d) for r, d in zip(rows, drawn)}


def test_each_distribution_and_its_parameters():
    x, logits = np.ones((64, 8), F32), np.zeros((64, 5), F32)

    def f(x, logits, k):
        ks = jax.random.split(k, 7)
        keep = jax.random.bernoulli(ks[0], 0.3, x.shape)
        u = jax.random.uniform(ks[1], x.shape, minval=-2.0, maxval=3.0)
        n = jax.random.normal(ks[2], x.shape)
        c = jax.random.categorical(ks[3], logits)
        t = jax.random.truncated_normal(ks[4], -1.0, 2.0, x.shape)
        i = jax.random.randint(ks[5], x.shape, 2, 9)
        scaled = jax.random.normal(ks[6], x.shape) * 0.1   # your arithmetic: derived
        return (jnp.where(keep, x, 0.0) + u * x + n * x + t * x + i * x + scaled * x,
                c + 1)

    rows = _rows(f, x, logits, jax.random.key(0))
    want = {
        "bernoulli": dict(distribution="bernoulli", p=float(F32(0.3))),
        "uniform": dict(distribution="uniform", minval=-2.0, maxval=3.0),
        "normal": dict(distribution="normal", mean=0.0, std=1.0),
        "categorical": dict(distribution="gumbel", loc=0.0, scale=1.0),
        "truncated_normal": dict(distribution="truncated_normal", lower=-1.0, upper=2.0),
        "randint": dict(distribution="randint", minval=2, maxval=9),
        "normal*": dict(distribution="derived"),
    }
    assert sorted(rows) == sorted(want)
    for name, params in want.items():
        row, drawn = rows[name]
        assert {k: row[k] for k in params} == params, (name, row)
        assert list(drawn.shape) == row["shape"]
    # the values the host fed lie in the support the metadata states
    assert rows["bernoulli"][0]["dtype"] == "bool"
    u = rows["uniform"][1]
    assert u.min() >= -2.0 and u.max() < 3.0
    t = rows["truncated_normal"][1]
    assert t.min() > -1.0 and t.max() < 2.0
    i = rows["randint"][1]
    assert rows["randint"][0]["dtype"] == "float32" and set(np.unique(i)) <= set(range(2, 9))
    assert rows["categorical"][0]["shape"] == [64, 5]


def test_a_dropout_mask_row_names_its_keep_probability():
    import flax.linen as nn

    drop = nn.Dropout(0.25, deterministic=False)
    x = np.ones((4, 6), F32)
    row, mask = _rows(lambda x, k: drop.apply({}, x, rngs={"dropout": k}), x,
                      jax.random.key(3))["bernoulli"]
    # flax keeps an element with probability 1 - rate
    assert row["distribution"] == "bernoulli" and row["p"] == 0.75
    assert mask.dtype == np.bool_ and row["feature"] == "random_bernoulli"
