"""The command line under bad flags, hostile or foreign packages and a closed pipe: one
line on stderr and a status, never a traceback; ``inspect`` knows both formats."""
import os
import subprocess
import sys

import pytest
from rely_common import has_coreai

from rlxjax.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _one_line_error(capsys, prefix):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(prefix) and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("flags, says", [
    (["--target", "iOS99"], "unknown target 'iOS99'"),
    (["--out", "FILE"], "it is a file"),
    pytest.param(["--backend", "coreml"], "only on macOS", marks=pytest.mark.skipif(
        sys.platform == "darwin", reason="Core ML's runtime exists here")),
])
def test_demo_bad_flags_are_one_line(tmp_path, capsys, flags, says):
    if "FILE" in flags:
        (tmp_path / "f").write_text("x")
        flags = [str(tmp_path / "f") if f == "FILE" else f for f in flags]
    assert main(["demo", "--steps", "1", *flags]) == 2
    assert says in _one_line_error(capsys, "rlxjax demo: ")


@pytest.mark.parametrize("out, says", [
    ("model.onnx", "must be a .mlpackage (Core ML) or .aimodel (Core AI) path"),
    ("FILE.mlpackage", "it is a file"),
])
def test_compile_bad_output_is_one_line(tmp_path, capsys, out, says):
    if out.startswith("FILE"):
        (tmp_path / out).write_text("x")
        out = str(tmp_path / out)
    assert main(["compile", "m.py:f", "--example", "f32[3]", "-o", out]) == 2
    assert says in _one_line_error(capsys, "rlxjax compile: ")


@pytest.mark.parametrize("fmt", ["mlpackage", pytest.param("aimodel", marks=pytest.mark.skipif(
    not has_coreai(), reason="coreai-core"))])
def test_inspect_describes_both_formats_and_refuses_their_damage(saved, tmp_path, capsys, fmt):
    path = saved(fmt)["mlstate"]
    assert main(["inspect", path]) == 0
    text = capsys.readouterr().out
    assert path in text and "[batch]" in text and "[loss]" in text and "states" in text
    # a package whose program was truncated: one line, exit 2
    from rely_common import copy

    bad = copy(path, tmp_path / f"bad.{fmt}")
    program = os.path.join(bad, "main.mlirb") if fmt == "aimodel" else os.path.join(
        bad, "Data", "com.apple.CoreML", "model.mlmodel")
    data = open(program, "rb").read()
    open(program, "wb").write(data[:len(data) // 2])
    assert main(["inspect", bad]) == 2
    assert "cannot read the" in _one_line_error(capsys, "rlxjax inspect: ")


def test_help_says_what_rlxjax_is(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "Core ML" in text and "Core AI" in text and ".aimodel" in text


def test_output_to_a_closed_pipe_ends_quietly(saved):
    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) is gone before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "rlxjax", "inspect",
                               saved("mlpackage")["io"]], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_a_missing_input_error_is_short_with_the_names_on_detail(saved):
    import numpy as np

    import rlxjax

    m = rlxjax.load(saved("mlpackage")["io"])
    with pytest.raises(rlxjax.ArgumentError) as info:
        m(x=np.zeros((8, 5), np.float32))
    assert len(str(info.value)) < 300 and "missing input(s)" in str(info.value)
    assert all(n in info.value.detail for n in m.input_names)
