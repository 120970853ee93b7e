"""docs/errors.md lists every exception class rlxjax defines, and each one is triggered
here the way a user (or, for the internal ones, a broken graph) would meet it."""
from __future__ import annotations

import importlib
import inspect
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax

DOC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "errors.md")
X = np.ones((2, 3), np.float32)


def _exception_classes():
    """name -> class for every exception class defined in an rlxjax module."""
    found = {}
    root = os.path.dirname(rlxjax.__file__)
    # walk the files, not pkgutil: some subpackages (rlxjax.coreml) are namespace packages
    for folder, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py") or f == "__main__.py":
                continue
            rel = os.path.relpath(os.path.join(folder, f), os.path.dirname(root))[:-3]
            modname = rel.replace(os.sep, ".").removesuffix(".__init__")
            try:
                mod = importlib.import_module(modname)
            except rlxjax.errors.BackendUnavailableError:
                continue  # a module of an optional extra that is not installed (rlxjax.flower)
            for name, obj in vars(mod).items():
                if (inspect.isclass(obj) and issubclass(obj, BaseException)
                        and obj.__module__ == modname and not name.startswith("_")):
                    found[name] = obj
    return found


CLASSES = _exception_classes()


def _doc():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def test_doc_lists_every_exception_class():
    doc = _doc()
    headings = set(re.findall(r"^### (\w+)\s*$", doc, re.M))
    missing = sorted(set(CLASSES) - headings)
    assert not missing, f"add these to docs/errors.md: {missing}"
    for name, cls in CLASSES.items():
        assert f"{cls.__module__}.{name}" in doc, f"docs/errors.md: give {name}'s import path"
    stale = sorted(headings - set(CLASSES))
    assert not stale, f"docs/errors.md documents classes rlxjax no longer has: {stale}"


def test_public_errors_are_rlx_errors_and_exported():
    """The user-facing section holds exactly the RlxError family."""
    doc = _doc()
    user = doc[doc.index("## User-facing errors"):doc.index("## Command-line errors")]
    documented = set(re.findall(r"^### (\w+)\s*$", user, re.M))
    family = {n for n, c in CLASSES.items() if issubclass(c, rlxjax.RlxError)}
    assert documented == family
    for name in family:
        if CLASSES[name].__module__ == "rlxjax.errors":
            assert getattr(rlxjax, name) is CLASSES[name], f"rlxjax.{name} not exported"


# -- triggers --------------------------------------------------------------------------
def _ref(fun, **kw):
    return rlxjax.coreml_jit(fun, backend="reference", **kw)


def _bad_backend():
    rlxjax.coreml_jit(lambda a: a, backend="gpu")(X)


def _validation():
    compiled = _ref(lambda a: a * 2).lower(X).compile()
    compiled.spec.description.output[0].name = "not_an_output"
    compiled.validate()


def _package_save(tmp):
    _ref(lambda a: a * 2).lower(X).compile().save(os.path.join(tmp, "model.txt"))


def _reference_runtime():
    from coremltools.proto import Model_pb2
    from rlxjax.coreml.interpreter.interpreter import ReferenceProgram

    model = Model_pb2.Model(specificationVersion=7)
    model.neuralNetwork.SetInParent()
    ReferenceProgram(model)


def _reference_state():
    from rlxjax.coreml.interpreter.state import ReferenceState

    ReferenceState({"kv": (np.dtype(np.float16), (2,))}).write_state("kv", np.ones(3, np.float16))


def _graph_verification():
    from rlxjax.ir import Graph, TensorType, DType
    from rlxjax.ir.verify import verify

    g = Graph("g")
    t = TensorType((2,), DType.f32)
    g.add_input("a", t)
    g.add_input("a", t)
    verify(g)


def _ir_type():
    from rlxjax.ir.ops import infer_types

    infer_types("no_such_op", [], {})


def _value_decode():
    from coremltools.proto import MIL_pb2
    from rlxjax.coreml.interpreter.values import tensor_signature

    tensor_signature(MIL_pb2.ValueType())


def _inspect(tmp):
    from rlxjax.inspect_package import load

    load(os.path.join(tmp, "missing.mlpackage"))


def _compile_cli():
    from rlxjax.compile_cli import parse_example

    parse_example("f64[3]")


def _coreai_runtime(tmp):
    from rlxjax.coreai.worker import Session

    Session(os.path.join(tmp, "missing.aimodel"))("main", {"x": np.ones(2, np.float32)})


def _ir_parse():
    from rlxjax.ir.parser import parse_graph

    parse_graph("this is not a graph")


def _out_of_memory():
    from rlxjax.training.budget import check_frozen_budget

    check_frozen_budget([np.ones((1024, 1024), np.float32)], None, "aimodel", available=1 << 20)


TRIGGERS = {  # class name -> (callable(tmp_path), regex the message must match)
    "RlxError": (lambda tmp: _bad_backend(), "unknown backend"),
    "UnsupportedPrimitiveError": (lambda tmp: _ref(lambda a: jnp.fft.rfft(a).real)(X), "fft"),
    "DynamicShapeError": (lambda tmp: _ref(lambda a: jnp.concatenate([a, a])).lower(
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("n, 3"), jnp.float32)).compile(),
        "flexible dimension 'n'"),
    "UnsupportedDTypeError": (lambda tmp: _ref(lambda k: k)(jax.random.PRNGKey(0)), "uint32"),
    "ZeroSizeError": (lambda tmp: _ref(lambda a: a[:0]).lower(X).compile().save(
        os.path.join(str(tmp), "z.mlpackage")), "zero-size"),
    "TargetError": (lambda tmp: _ref(lambda a: a, target="iOS12")(X), "unknown target"),
    "ArgumentError": (lambda tmp: _ref(lambda a: a * 2).lower(X).compile()(
        np.ones((3, 3), np.float32)), "compiled for float32"),
    "BackendUnavailableError": (lambda tmp: rlxjax.coreml_jit(lambda a: a, backend="coreml")(X),
                                "macOS"),
    "ValidationError": (lambda tmp: _validation(), "not_an_output"),
    "PackageError": (lambda tmp: _package_save(str(tmp)), r"\.mlpackage"),
    "ReferenceRuntimeError": (lambda tmp: _reference_runtime(), "not an mlProgram"),
    "ReferenceStateError": (lambda tmp: _reference_state(), "holds float16"),
    "CoreAIRuntimeError": (lambda tmp: _coreai_runtime(str(tmp)), "the Core AI runtime"),
    "OutOfMemoryRisk": (lambda tmp: _out_of_memory(), "RLXJAX_MEMORY_CHECK=0"),
    "InspectError": (lambda tmp: _inspect(str(tmp)), "no such file"),
    "CompileCommandError": (lambda tmp: _compile_cli(), "unknown dtype"),
    "GraphVerificationError": (lambda tmp: _graph_verification(), "duplicate input"),
    "IRTypeError": (lambda tmp: _ir_type(), "unknown RLX op"),
    "IRParseError": (lambda tmp: _ir_parse(), "line 1"),
    "ValueDecodeError": (lambda tmp: _value_decode(), "expected a tensor type"),
}


def test_every_class_has_a_trigger():
    assert sorted(set(CLASSES) - set(TRIGGERS)) == [], "add a trigger to TRIGGERS"
    assert sorted(set(TRIGGERS) - set(CLASSES)) == [], "TRIGGERS names a class rlxjax lacks"


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_trigger(name, tmp_path):
    if name == "BackendUnavailableError":
        from rlxjax.coreml.backends import is_macos

        if is_macos():
            pytest.skip("Core ML's runtime exists here")
    fn, pattern = TRIGGERS[name]
    with pytest.raises(BaseException) as info:
        fn(tmp_path)
    assert type(info.value) is CLASSES[name], (type(info.value), info.value)
    assert re.search(pattern, str(info.value)), str(info.value)
