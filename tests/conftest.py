"""The suite's shared setup: tests/ on sys.path, the test backend switch, macOS-only skips.

The test files import the shared modules here (helpers, models, op_samples, ...) by plain
name from any folder. ``RLXJAX_TEST_BACKEND`` chooses where the programs the tests run on
the reference backend really run (see ``_programs_run_on_test_backend``);
``RLXJAX_PROGRAM_HASHES`` records every program's hash (tests/program_hashes.py); tests
marked ``coreml_runtime`` are skipped off macOS.
"""
import os
import sys

# Keras (tests/models/test_keras_hub.py) picks its backend when first imported, and
# coremltools may import it (through TensorFlow) before any test module runs
os.environ.setdefault("KERAS_BACKEND", "jax")

import pytest  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

_HASHES = None  # program_hashes.Recorder when RLXJAX_PROGRAM_HASHES is set


def pytest_configure(config):
    global _HASHES
    from rlxjax import coremltools_quiet  # noqa: F401  (coremltools without notices)
    import program_hashes

    if program_hashes.FOLDER and _HASHES is None:  # tests/program_hashes.py
        from hypothesis import settings

        settings.register_profile("program-hashes", derandomize=True, database=None)
        settings.load_profile("program-hashes")
        _HASHES = program_hashes.install()
    from helpers import TEST_BACKEND, TEST_BACKENDS
    from rlxjax.coreml.backends import is_macos

    if TEST_BACKEND not in TEST_BACKENDS:
        raise pytest.UsageError(f"RLXJAX_TEST_BACKEND={TEST_BACKEND!r}: use one of "
                                f"{', '.join(TEST_BACKENDS)}")
    if TEST_BACKEND == "coreml" and not is_macos():
        raise pytest.UsageError("RLXJAX_TEST_BACKEND=coreml runs the tests on Core ML's "
                                "runtime, which exists only on macOS")
    if TEST_BACKEND == "coreai":
        from rlxjax.coreai import ca_private
        from rlxjax.errors import BackendUnavailableError

        try:
            ca_private.coreai()
        except BackendUnavailableError as e:
            raise pytest.UsageError(f"RLXJAX_TEST_BACKEND=coreai: {e}") from None


def pytest_report_header(config):
    from helpers import TEST_BACKEND

    return (f"rlxjax test backend: {TEST_BACKEND} (RLXJAX_TEST_BACKEND=reference-fast: the "
            "reference interpreter's accelerated path; =coreml on macOS: Core ML; =coreai: "
            "check_against_jax on Core AI's runtime, format='aimodel')")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _HASHES is not None:  # the programs of this test, numbered from 0
        path, _, rest = item.nodeid.partition("::")
        _HASHES.test, _HASHES.n = f"{os.path.basename(path)}::{rest}", 0
    yield


def _sampled_functions():
    path = os.path.join(os.path.dirname(__file__), "sampled_in_default_run.txt")
    with open(path) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def _sample_parametrized(config, items):
    """The default run samples the parametrized tests tests/sampled_in_default_run.txt
    lists: every third case of each (the 1st, 4th, ...) runs, the others are marked slow
    (``python -m pytest -m slow`` runs them). Positions count in collection order, which
    is the same in every xdist worker."""
    sampled, seen = _sampled_functions(), {}
    for item in items:
        function, bracket, _ = item.nodeid.partition("[")
        if bracket and function in sampled:
            seen[function] = seen.get(function, -1) + 1
            if seen[function] % 3:
                item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before -m 'not slow' deselects
def pytest_collection_modifyitems(config, items):
    from rlxjax.coreml.backends import is_macos

    _sample_parametrized(config, items)

    skip = pytest.mark.skip(reason="needs Core ML's runtime (macOS only)")
    for item in items:
        if "coreml_runtime" in item.keywords and not is_macos():
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _programs_run_on_test_backend(request, monkeypatch):
    """With RLXJAX_TEST_BACKEND=coreml, every program the tests run on the reference backend
    (``backend="reference"``, as the tests spell it) runs on Core ML instead, so that the
    same comparisons with JAX check Core ML's real runtime. Tests about the reference
    interpreter itself opt out with ``@pytest.mark.reference_backend``.
    With RLXJAX_TEST_BACKEND=reference-fast, every reference program the library makes
    (``backend="reference"`` and ``rlxjax.load``) runs on the interpreter's accelerated path
    (tests constructing ``ReferenceProgram`` themselves keep it). With the default
    (reference) nothing changes."""
    from helpers import TEST_BACKEND
    from rlxjax.coreml import backends

    if TEST_BACKEND == "reference-fast":
        oracle = backends.reference_program
        monkeypatch.setattr(backends, "reference_program",
                            lambda model, weights_dir, accelerated=False:
                            oracle(model, weights_dir, accelerated=True))
        return
    if TEST_BACKEND != "coreml" or "reference_backend" in request.keywords:
        return
    test_backend = _core_ml_test_backend(backends.CoreMLBackend)
    monkeypatch.setattr(backends, "ReferenceBackend", test_backend)
    monkeypatch.setattr(backends, "AcceleratedReferenceBackend", test_backend)
    monkeypatch.setattr(backends, "CoreMLBackend", test_backend)  # backend="coreml" too


def _core_ml_test_backend(core_ml_backend):  # pragma: no cover - macOS only
    """Core ML's runtime on the compute units ``RLXJAX_TEST_COMPUTE_UNITS`` names (default
    CPU_ONLY: fp32 end to end, so the fp32 tolerances against JAX apply)."""
    import tempfile

    import coremltools as ct

    from rlxjax.coreml.package import save_mlpackage

    units = os.environ.get("RLXJAX_TEST_COMPUTE_UNITS", "CPU_ONLY")

    class CoreMLTestBackend(core_ml_backend):
        def __init__(self, model, weights_dir):
            self._dir = tempfile.mkdtemp(prefix="rlxjax-coreml-test-")
            path = save_mlpackage(model, weights_dir, f"{self._dir}/model.mlpackage")
            self.model = ct.models.MLModel(path, compute_units=getattr(ct.ComputeUnit, units))

    return CoreMLTestBackend
