"""One key for parameter values (ir/graph.py ``param_key``), used by ``Params`` equality
and hashing and by CSE: values that compute differently never share a key."""
import numpy as np

from rlxjax.ir import DType, Graph, Params, TensorType
from rlxjax.ir.builder import Builder
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
    bld = Builder(g)
    x = g.add_input("x", TensorType((2, 3), DType.f32))

    def norm(eps):
        return bld.add("rms_norm", x, axis=1, eps=eps, has_gamma=False, has_beta=False)

    a, b, c = norm(0.0), norm(-0.0), norm(0.0)
    g.outputs = [("y", bld.add("add", bld.add("add", a, b), c))]
    assert cse(g) == 1  # c merged into a; b (eps=-0.0) stays
    assert [n.params["eps"] for n in g.nodes if n.op == "rms_norm"] == [0.0, -0.0]
    assert str(g.nodes[1].params["eps"]) == "-0.0"


# -- large arrays: keyed by content without a copy (ir/graph.py ArrayContent) -------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlxjax.ir.graph import ArrayContent  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(st.integers(ArrayContent.MIN_BYTES // 4 + 1, 40000), st.data())
def test_large_array_keys_are_equal_exactly_when_the_bytes_are(n, data):
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert param_key(a) == param_key(a.copy())
    assert hash(param_key(a)) == hash(param_key(a.copy()))
    i = data.draw(st.integers(0, n - 1))  # one element anywhere, most often off the sample
    b = a.copy()
    b[i] = data.draw(st.sampled_from([np.nextafter(a[i], np.inf), -a[i], np.nan]))
    assert param_key(a) != param_key(b)
    assert param_key(b) == param_key(b.copy())  # a NaN equals itself, as with tobytes
    z, nz = np.zeros(n, np.float32), np.zeros(n, np.float32)
    nz[i] = -0.0
    assert param_key(z) != param_key(nz)
    assert param_key(a) != param_key(a.view(np.int32))  # same bytes, another dtype
    assert param_key(a) != param_key(a.reshape(1, n))


def test_params_keep_a_frozen_array_and_copy_a_writable_one():
    w = np.arange(10000, dtype=np.float32)
    p = Params({"value": w})
    assert p["value"] is not w and not p["value"].flags.writeable
    w[0] = 7.0  # the caller's array changes; the params do not
    assert p["value"][0] == 0.0
    assert Params({"value": p["value"]})["value"] is p["value"]  # frozen: not copied again
    view = p["value"].reshape(100, 100)
    assert Params({"value": view})["value"] is view
    base = np.arange(4.0)
    ro = base.view()
    ro.setflags(write=False)  # read-only, but over memory the caller can still change
    assert Params({"value": ro})["value"] is not ro
