"""One way to derive a program from a traced one (``Traced.derive``, rlxjax/frontend): a
per-leaf table named once in ``frontend.LEAF_TABLES`` is carried, re-indexed, through every
transform that adds or removes argument leaves - grad, state=, the training step (io and
mlstate), a frozen (trainable=) base and a multifunction package's predict."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax import frontend


@dataclasses.dataclass
class _Probed(frontend.Traced):
    """A Traced with one more per-leaf table: leaf index -> the leaf's index when traced."""
    probe: dict = dataclasses.field(default_factory=dict)


@pytest.fixture
def derived(monkeypatch):
    """Every Traced the transforms derive, from a trace that carries ``probe``."""
    seen = []
    trace = frontend.trace  # every compile traces through it (rlxjax/stages.py)

    def probed_trace(*a, **k):
        t = trace(*a, **k)
        fields = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
        return _Probed(**fields, probe={i: i for i in range(t.in_tree.num_leaves)})

    derive = frontend.Traced.derive

    def spy(self, *a, **k):
        out = derive(self, *a, **k)
        seen.append((self, out, k.get("remove", range(0))))
        return out

    monkeypatch.setattr(frontend, "LEAF_TABLES", frontend.LEAF_TABLES + ("probe",))
    monkeypatch.setattr(frontend, "trace", probed_trace)
    monkeypatch.setattr(frontend.Traced, "derive", spy)
    return seen


def _carried(seen, expect_removed):
    assert seen, "no program was derived"
    for parent, child, remove in seen:
        assert isinstance(child, _Probed)
        kept = [i for i in range(parent.in_tree.num_leaves) if i not in remove]
        assert child.probe == {j: parent.probe[i] for j, i in enumerate(kept)}
    assert [len(r) for _, _, r in seen] == expect_removed


P = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
X, Y = np.ones((4, 3), np.float32), np.ones((4, 2), np.float32)


def _loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)


def test_grad(derived):
    rlxjax.coreml_grad(_loss).lower(P, X, Y)
    _carried(derived, [0])


def test_state(derived):
    def acc(w, state, x):
        total = state["total"] + x
        return w * total, {"total": total}

    rlxjax.coreml_jit(acc, state="state").lower(np.float32(2), {"total": X}, X)
    _carried(derived, [1])


@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_train_step(derived, mode):
    step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1), state=mode, target="iOS18")
    step.init(P, X, Y)
    # the train graph; mlstate: with params (2 leaves, sgd keeps none) made states
    _carried(derived, [0] if mode == "io" else [2])


def test_frozen_base(derived):
    step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1), trainable={"w": False, "b": True})
    step.init(P, X, Y)
    assert 1 in [len(r) for _, _, r in derived]  # the frozen w baked as a weight
    _carried(derived, [len(r) for _, _, r in derived])


def test_multifunction_predict(derived, tmp_path):
    step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1), state="mlstate", target="iOS18")
    step.init(P, X, Y)
    n = len(derived)
    step.save(tmp_path / "m.mlpackage", predict=(lambda p, x: jnp.tanh(x @ p["w"] + p["b"]), X))
    assert len(derived) > n  # predict's params read from the train step's states
    _carried(derived, [len(r) for _, _, r in derived])


def test_removed_leaves_leave_every_table_alike():
    """The copies derive replaced differed: frozen.py moved a uint32 leaf it baked to a
    negative index (u32_leaves) while dropping it from nan_sign. No call reads a negative
    index, so no number was wrong; every table now loses the removed leaves alike."""
    from rlxjax.ir import Graph

    t = rlxjax.coreml_jit(lambda a, b, c, d: a).lower(*[np.ones(2, np.float32)] * 4)._traced
    t = dataclasses.replace(t, u32_leaves=frozenset({0, 3}), nan_sign={0: "a", 3: "d"},
                            dropped={1: ("b", (2,), "uint32")})
    d = t.derive(Graph(), remove=range(2))
    assert (d.u32_leaves, d.nan_sign, d.dropped) == (frozenset({1}), {1: "d"}, {})
    m = t.derive(Graph(), remove=range(1, 3))  # a state argument in the middle
    assert (m.u32_leaves, m.nan_sign, m.dropped) == (frozenset({0, 1}), {0: "a", 1: "d"}, {})
    with pytest.raises(TypeError, match="carried, not given"):
        t.derive(Graph(), nan_sign={})
