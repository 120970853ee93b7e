"""The suite's backend switch (RLXJAX_TEST_BACKEND, see conftest.py): programs the tests
run with backend="reference" run on the test backend, so that under
RLXJAX_TEST_BACKEND=coreml (macOS) the comparisons with JAX check Core ML's runtime."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from rlxjax.coreml import backends
from rlxjax.coreml.backends import make_backend

from helpers import TEST_BACKEND, check_against_jax


def _program():
    return rlxjax.coreml_jit(lambda x: jnp.tanh(x) * 2).lower(np.ones(3, np.float32)).compile()


def test_reference_requests_run_on_the_test_backend():
    backend = make_backend("reference", _program().spec, None)
    want = backends.CoreMLBackend if TEST_BACKEND == "coreml" else backends.ReferenceBackend
    assert isinstance(backend, want), type(backend)
    x = np.linspace(-2, 2, 3, dtype=np.float32)
    out = backend.run({"x": x})
    np.testing.assert_allclose(np.asarray(out["out"]), 2 * np.tanh(x), rtol=1e-6, atol=1e-6)


@pytest.mark.reference_backend
def test_reference_backend_marker_keeps_the_interpreter():
    assert isinstance(make_backend("reference", _program().spec, None), backends.ReferenceBackend)


def test_check_against_jax_uses_the_test_backend():
    compiled = check_against_jax(lambda x: jnp.sin(x) + 1, np.linspace(-3, 3, 7, dtype=np.float32))
    assert compiled.op_histogram()["sin"] == 1


def test_reference_requests_run_on_the_chosen_reference_path():
    """RLXJAX_TEST_BACKEND=reference-fast: what the library makes for backend="reference"
    runs on the accelerated path; by default on the oracle; "reference-fast" always
    accelerated."""
    from rlxjax.coreml.interpreter import AcceleratedProgram, ReferenceProgram

    if TEST_BACKEND == "coreml":  # pragma: no cover - macOS only
        pytest.skip("programs run on Core ML")
    spec = _program().spec
    program = make_backend("reference", spec, None).program
    if TEST_BACKEND == "reference-fast":
        assert isinstance(program, AcceleratedProgram)
    else:
        assert type(program) is ReferenceProgram
    assert isinstance(make_backend("reference-fast", spec, None).program, AcceleratedProgram)
