"""The pass pipeline (rlxjax/transforms/pipeline.py): named passes, in one place, run on
every region where the pass says so."""
import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from rlxjax.frontend import trace
from rlxjax.transforms import pipeline
from rlxjax.transforms.regions import all_regions


def _norm(x):
    m = x.mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def _fn(x):
    def body(c, xs):  # a norm inside a loop body: a region
        return c + _norm(xs).sum(), None

    c, _ = jax.lax.scan(body, jnp.float32(0), x)
    return jax.nn.relu(_norm(x)).sum() + c


X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def _traced():
    return trace(_fn, [jax.ShapeDtypeStruct(X.shape, X.dtype)], ["x"]).graph


def _count(graphs, op):
    return sum(n.op == op for g in graphs for n in g.nodes)


def test_stages_name_registered_passes():
    for name in pipeline.BEFORE_AD + pipeline.AFTER_AD:
        assert pipeline.PASSES[name].name == name
    # norms first (they take precedence), then activations, then attention (which needs the
    # fused softmax)
    assert pipeline.BEFORE_AD == ("recognize_norms", "recognize_activations",
                                  "recognize_attention")
    assert pipeline.AFTER_AD.index("inline_custom_calls") < pipeline.AFTER_AD.index("simplify")


def test_a_region_pass_runs_on_every_region():
    graph = _traced()
    regions = all_regions(graph)
    assert regions and _count(regions, "layer_norm") == 0
    results = pipeline.run_passes(graph, ["recognize_norms"])
    assert len(results["recognize_norms"]) == 1 + len(regions)  # top level first
    assert _count([graph], "layer_norm") == 1 and _count(regions, "layer_norm") == 1


def test_a_top_level_pass_leaves_regions_alone():
    graph = _traced()
    assert _count([graph], "custom_vjp") == 1  # relu's custom_jvp
    results = pipeline.run_passes(graph, ["inline_custom_calls"])
    assert results == {"inline_custom_calls": [True]}
    assert _count([graph], "custom_vjp") == 0


def test_lower_runs_the_pipeline(monkeypatch):
    lowered = rlxjax.coreml_jit(_fn).lower(X)
    assert _count([lowered.graph], "layer_norm") == 1
    assert _count([lowered.graph], "custom_vjp") == 0
    monkeypatch.setattr(pipeline, "BEFORE_AD", ())
    assert _count([rlxjax.coreml_jit(_fn).lower(X).graph], "layer_norm") == 0
