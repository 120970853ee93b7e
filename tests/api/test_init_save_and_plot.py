"""``step.init(params, *example_batch)`` compiles, so ``save`` works before the first step;
``init(params)`` alone leaves the batch shapes unknown and ``save`` says how to give them.
The demo's plot is titled and shows the held-out accuracy beside the loss."""
from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import rlxjax


def _loss(p, x):
    return ((x @ p["w"]) ** 2).mean()


P, X = {"w": np.ones((3, 2), np.float32)}, np.ones((4, 3), np.float32)


def test_save_after_init_with_a_batch_and_the_reason_without(tmp_path):
    step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1))
    step.init(P)
    with pytest.raises(rlxjax.RlxError, match=r"pass an example batch to init"):
        step.save(tmp_path / "no.mlpackage")
    st = step.init(P, X)
    path = step.save(tmp_path / "yes.mlpackage")          # before any step
    loaded = rlxjax.load(path)
    new, loss = loaded(st, X)
    want_loss, g = jax.value_and_grad(_loss)(P, X)
    np.testing.assert_allclose(new.params["w"], P["w"] - 0.1 * g["w"], rtol=1e-6)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)


def test_the_demo_plot_has_a_title_and_the_accuracy():
    plt = pytest.importorskip("matplotlib.pyplot")
    from rlxjax.demo import _figure

    acc = {"JAX": 0.9, "ML Program": 0.9, "Core AI": 0.875}
    fig = _figure(plt, [2.0, 1.0], [2.0, 1.0], [2.0, 1.1], acc)
    try:
        title = fig._suptitle.get_text()
        assert "final loss 1" in title and "held-out accuracy" in title and "87.5%" in title
        loss_ax, acc_ax = fig.axes
        assert loss_ax.get_title() == "training loss" and loss_ax.get_yscale() == "log"
        assert [round(b.get_height(), 3) for b in acc_ax.patches] == [0.9, 0.9, 0.875]
        assert [t.get_text() for t in acc_ax.get_xticklabels()] == list(acc)
    finally:
        plt.close(fig)
