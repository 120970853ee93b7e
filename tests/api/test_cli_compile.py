"""``rlxjax compile MODULE:FUNCTION --example SHAPES... -o OUT.mlpackage [--grad]``, run
in-process: the packages it writes compute what JAX computes, and every bad argument is
one line on stderr with exit status 2."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import jax
import numpy as np
import pytest

import rlxjax
from rlxjax.cli import main
from rlxjax.compile_cli import CompileCommandError, parse_example

from helpers import TEST_BACKEND, assert_tree_close

SOURCE = textwrap.dedent("""
    import jax, jax.numpy as jnp

    def predict(x, w, n):
        return jax.nn.gelu(x @ w) * n.astype(jnp.float32).sum()

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    def spectrum(x):
        return jnp.abs(jnp.fft.fft(x))

    def optional(x, scale=2.0):
        return x * scale

    NOT_A_FUNCTION = 3
""")


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module (unique name) in the current folder; sys.path restored afterwards."""
    name = f"cli_model_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def _inputs(seed, *shapes):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in shapes]


def test_compile_dotted_module_matches_jax(module, tmp_path, capsys):
    out = tmp_path / "out" / "predict.mlpackage"
    rc = main(["compile", f"{module}:predict", "--example", "f32[8,4]", "float32[4,3]",
               "i32[2]", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert f"wrote {out}" in text and "x: float32[8, 4]" in text and "n: int32[2]" in text
    x, w = _inputs(0, (8, 4), (4, 3))
    n = np.array([2, -1], np.int32)
    got = rlxjax.load(out, backend=TEST_BACKEND, flat=True)(x, w, n)["out"]
    mod = sys.modules[module]
    assert_tree_close(got, np.asarray(jax.jit(mod.predict)(x, w, n)), rtol=1e-5, atol=1e-6)


def test_compile_file_path_grad_and_target(module, tmp_path, capsys):
    from coremltools.models.utils import load_spec

    out = tmp_path / "grad.mlpackage"
    rc = main(["compile", f"./{module}.py:loss", "--example", "f32[4,3]", "f32[8,4]",
               "-o", str(out), "--grad", "--target", "iOS16"])
    assert rc == 0, capsys.readouterr().err
    assert "gradient of" in capsys.readouterr().out
    assert load_spec(str(out)).specificationVersion == 7  # iOS16
    w, x = _inputs(1, (4, 3), (8, 4))
    got = rlxjax.load(out, backend=TEST_BACKEND, flat=True)(w, x)
    (g,) = got.values()
    mod = sys.modules[f"{module}"]
    assert_tree_close(g, np.asarray(jax.grad(mod.loss)(w, x)), rtol=1e-5, atol=1e-6)


def test_default_arguments_may_be_left_out(module, tmp_path):
    assert main(["compile", f"{module}:optional", "--example", "f32[3]",
                 "-o", str(tmp_path / "o.mlpackage")]) == 0


@pytest.mark.parametrize("args, message", [
    (["{m}:predict", "--example", "f32[8,4", "f32[4,3]", "i32[2]"],
     "malformed --example 'f32[8,4'"),
    (["{m}:predict", "--example", "f32[8,x]", "f32[4,3]", "i32[2]"], "dimension 'x' is not"),
    (["{m}:predict", "--example", "f64[8,4]", "f32[4,3]", "i32[2]"], "unknown dtype 'f64'"),
    (["no_such_module_xyz:f", "--example", "f32[1]"], "no module named 'no_such_module_xyz'"),
    (["missing/dir/model.py:f", "--example", "f32[1]"], "no such Python file"),
    (["{m}:nope", "--example", "f32[1]"], "has no attribute 'nope'"),
    (["{m}:NOT_A_FUNCTION", "--example", "f32[1]"], "is not callable"),
    (["{m}:predict", "--example", "f32[8,4]"], "takes 3 positional argument(s), but 1"),
    (["{m}:optional", "--example", "f32[3]", "f32[]", "f32[]"], "takes 1 to 2 positional"),
    (["{m}", "--example", "f32[1]"], "expected MODULE:FUNCTION"),
    (["{m}:spectrum", "--example", "f32[8]"], "dtype complex64 is not supported"),
    (["{m}:predict", "--example", "f32[8,4]", "f32[4,3]", "i32[2]", "--grad"],
     "gradient only defined for scalar float losses"),
    (["{m}:loss", "--example", "f32[4,3]", "f32[8,4]", "--target", "iOS9"], "unknown target"),
    (["{m}:loss", "--example", "f32[4,3]", "f32[8,5]"], "tracing {m}:loss on the example shapes "
     "failed: TypeError"),
])
def test_bad_arguments_are_one_line_exit_2(module, tmp_path, capsys, args, message):
    args = [a.format(m=module) for a in args]
    rc = main(["compile", *args, "-o", str(tmp_path / "o.mlpackage")])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, captured
    assert err.startswith("rlxjax compile: ") and "\n" not in err, err
    assert message.format(m=module) in err
    assert captured.out == "" and not (tmp_path / "o.mlpackage").exists()


def test_module_that_fails_to_import(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "broken_mod_cli.py").write_text("import not_installed_pkg_xyz\n")
    rc = main(["compile", "broken_mod_cli:f", "--example", "f32[1]", "-o", "o.mlpackage"])
    err = capsys.readouterr().err.strip()
    sys.modules.pop("broken_mod_cli", None)
    assert rc == 2 and "\n" not in err
    assert "importing broken_mod_cli failed: ModuleNotFoundError" in err
    assert "not_installed_pkg_xyz" in err


def test_output_must_be_an_mlpackage_or_aimodel(module, capsys):
    assert main(["compile", f"{module}:loss", "--example", "f32[4,3]", "f32[8,4]",
                 "-o", "model.zip"]) == 2
    assert "must be a .mlpackage (Core ML) or .aimodel (Core AI) path" in \
        capsys.readouterr().err


def test_parse_example():
    assert parse_example("f32[8, 4]") == ((8, 4), np.dtype(np.float32))
    assert parse_example("bool[]") == ((), np.dtype(np.bool_))
    assert parse_example("u8[0]") == ((0,), np.dtype(np.uint8))
    with pytest.raises(CompileCommandError, match="malformed"):
        parse_example("f32(3)")
    with pytest.raises(CompileCommandError, match="not a non-negative integer"):
        parse_example("f32[-1]")


def test_console_command_exits_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rlxjax", "compile", "nowhere_xyz:f",
                           "--example", "f32[1]", "-o", "o.mlpackage"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("rlxjax compile: no module named")
    assert "Traceback" not in proc.stderr
