"""rlxjax/_jax_compat.py is the one place that touches JAX internals (issue 14, item 9)."""
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

from rlxjax import _jax_compat as jc

PKG = pathlib.Path(jc.__file__).resolve().parent
# Imports of JAX's non-public or moving modules.
INTERNAL = re.compile(
    r"^\s*(from|import)\s+jax\.(_src|core|extend|interpreters)\b|"
    r"^\s*from\s+jax\s+import\s+.*\b(core|_src|interpreters|extend)\b", re.M)


def test_no_module_but_the_compat_module_imports_jax_internals():
    offenders = [str(p.relative_to(PKG)) for p in sorted(PKG.rglob("*.py"))
                 if p.name != "_jax_compat.py" and INTERNAL.search(p.read_text())]
    assert offenders == []


def test_jaxpr_types_are_the_ones_make_jaxpr_produces():
    closed = jax.make_jaxpr(lambda x: (jnp.sin(x) + 1.0, x))(np.ones(3, np.float32))
    assert isinstance(closed, jc.ClosedJaxpr) and isinstance(closed.jaxpr, jc.Jaxpr)
    eqn = closed.jaxpr.eqns[-1]
    assert isinstance(eqn.invars[1], jc.Literal)
    assert isinstance(eqn.outvars[0], jc.Var)
    assert f"{pathlib.Path(__file__).name}:" in jc.summarize_source(eqn.source_info)


def test_drop_var_is_jaxs_unused_output_variable():
    # jax 0.10 made it public as jax.extend.core.DropVar; earlier lines only in jax._src.core
    assert issubclass(jc.DropVar, jc.Var) and jc.DropVar.__name__ == "DropVar"


def test_equation_binder_applies_the_custom_rule():
    closed = jax.make_jaxpr(jax.nn.relu)(np.float32(0.0))
    eqn = next(e for e in closed.jaxpr.eqns if e.primitive.name == "custom_jvp_call")
    bind = jc.equation_binder(eqn)
    y, dy = jax.jvp(lambda x: bind(x)[0], (np.float32(0.0),), (np.float32(1.0),))
    assert float(y) == 0.0 and float(dy) == 0.0  # relu's rule: derivative 0 at 0


def test_logaddexp_is_the_lax_level_function():
    out = jc.logaddexp()(np.float32(0.0), np.float32(0.0))
    np.testing.assert_allclose(np.asarray(out), np.log(2.0), rtol=1e-6)


def test_extension_hooks_resolve():
    assert callable(jc.mlir.register_lowering) and callable(jc.mlir.lower_fun)
    assert isinstance(jc.ad.primitive_jvps, dict)
    assert isinstance(jc.batching.fancy_primitive_batchers, dict)
    assert jc.ShapedArray((2,), np.float32).shape == (2,)


# -- the declared range is the tested range ------------------------------------------------
ROOT = PKG.parent


def _pyproject_requirements():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["test"]
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower(): r for r in reqs}


def test_pyproject_jax_range_is_the_supported_lines():
    reqs = _pyproject_requirements()
    first, last = jc.SUPPORTED_LINES[0], jc.SUPPORTED_LINES[-1]
    for name in ("jax", "jaxlib"):
        assert reqs[name] == f"{name}>={first[0]}.{first[1]}.0,<{last[0]}.{last[1] + 1}"
    assert jc.LINE in jc.SUPPORTED_LINES, f"jax {jax.__version__} is outside the tested range"


def test_oldest_constraints_pin_the_declared_lower_bounds():
    """.ci/run's second run installs exactly the lower bounds pyproject.toml declares."""
    reqs = _pyproject_requirements()
    lines = (ROOT / ".ci" / "constraints-oldest.txt").read_text().splitlines()
    pins = dict(ln.split("==") for ln in lines if ln.strip() and not ln.startswith("#"))
    assert {"jax", "jaxlib", "flax", "optax", "equinox"} <= set(pins)
    for name, version in pins.items():
        assert f"{name}>={version}" in reqs[name], (name, version, reqs[name])
    assert "-c .ci/constraints-oldest.txt" in (ROOT / ".ci" / "run").read_text()


# -- issue 17: dead-code elimination, source frames, re-binding ------------------------------
def test_dce_closed_jaxpr_removes_dead_randomness_keeps_effects_and_asked_inputs():
    from jax.experimental import io_callback

    def f(x, k, unused):
        _ = jax.random.normal(jax.random.split(k)[0], (3,))   # dead
        io_callback(lambda a: a, jax.ShapeDtypeStruct((3,), np.float32), x)  # effect: kept
        return x * 2.0

    closed = jax.make_jaxpr(f)(np.ones(3, np.float32), jax.random.key(0), np.float32(1))
    new, used = jc.dce_closed_jaxpr(closed, [False, False, True])
    names = [e.primitive.name for e in new.jaxpr.eqns]
    assert used == [True, False, True] and len(new.jaxpr.invars) == 2
    assert "io_callback" in names and not any(n.startswith("random") for n in names)


def test_source_frames_and_eval_equation_keep_the_users_line():
    closed = jax.make_jaxpr(lambda x: jnp.sin(x))(np.float32(1))
    eqn = closed.jaxpr.eqns[0]
    frames = jc.source_frames(eqn.source_info)
    user = [f for f in frames if f[3]]
    assert user and user[0][0] == __file__ and frames[0][3] is False  # innermost: JAX's
    rebound = jax.make_jaxpr(lambda x: jc.eval_equation(eqn, [x])[0])(np.float32(1))
    again = [f for f in jc.source_frames(rebound.jaxpr.eqns[0].source_info) if f[3]]
    assert again[0] == user[0]  # the original line, not this one
