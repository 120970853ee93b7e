"""One key for parameter values (ir/graph.py ``param_key``), used by ``Params`` equality
and hashing and by CSE: values that compute differently never share a key."""
import numpy as np

from rlxjax.ir import DType, Graph, Params, TensorType
from rlxjax.ir.graph import param_key
from rlxjax.transforms.cse import cse


def test_signed_zeros_are_different_parameters():
    assert param_key(0.0) != param_key(-0.0)
    assert Params({"v": 0.0}) != Params({"v": -0.0})
    assert Params({"v": (1.0, -0.0)}) != Params({"v": (1.0, 0.0)})
    assert Params({"v": -0.0}) == Params({"v": -0.0})
    assert hash(Params({"v": -0.0})) == hash(Params({"v": -0.0}))


def test_keys_name_the_type_and_compare_arrays_by_content():
    assert len({param_key(1), param_key(1.0), param_key(True)}) == 3
    assert param_key(float("nan")) == param_key(float("nan"))
    a = np.array([0.0, 1.0], np.float32)
    assert param_key(a) == param_key(a.copy())
    assert param_key(a) != param_key(np.array([-0.0, 1.0], np.float32))
    assert param_key(a) != param_key(a.astype(np.float16))


def test_cse_merges_equal_params_and_keeps_signed_zeros_apart():
    g = Graph()
    x = g.add_input("x", TensorType((2, 3), DType.f32))

    def norm(eps):
        return g.add("rms_norm", x, axis=1, eps=eps, has_gamma=False, has_beta=False)

    a, b, c = norm(0.0), norm(-0.0), norm(0.0)
    g.outputs = [("y", g.add("add", g.add("add", a, b), c))]
    assert cse(g) == 1  # c merged into a; b (eps=-0.0) stays
    assert [n.params["eps"] for n in g.nodes if n.op == "rms_norm"] == [0.0, -0.0]
    assert str(g.nodes[1].params["eps"]) == "-0.0"
