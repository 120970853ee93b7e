"""The format registry (rlxjax/formats/): formats by name and by package suffix, targets
resolved once into the format's Target, clear errors for unknown names."""
import numpy as np
import pytest

import rlxjax
from rlxjax import formats


def test_the_default_format_is_core_ml_and_is_found_by_its_suffix():
    fmt = formats.get()
    assert formats.DEFAULT == fmt.name == "mlpackage" and fmt.suffix == ".mlpackage"
    assert formats.for_path("/x/model.mlpackage") is fmt
    assert formats.for_path("/x/model.mlpackage/") is fmt


def test_an_unknown_format_names_the_known_ones():
    with pytest.raises(rlxjax.ArgumentError, match="unknown format 'onnx'.*'mlpackage'"):
        formats.get("onnx")


def test_a_target_is_resolved_once_into_the_formats_target():
    f = rlxjax.coreml_jit(lambda x: x + 1, target="macOS15", backend="reference")
    assert f.target.name == "iOS18" and f.target.at_least("iOS17")
    assert formats.resolve_target(f.target) is f.target  # carried as it is
    lowered = f.lower(np.ones(2, np.float32))
    assert lowered.target is f.target
    with pytest.raises(rlxjax.TargetError, match="needs target iOS26"):
        f.target.require("iOS26", "a feature")


def test_an_unknown_target_fails_when_the_wrapper_is_built():
    with pytest.raises(rlxjax.TargetError, match="unknown target 'iOS99'"):
        rlxjax.coreml_jit(lambda x: x, target="iOS99")
    with pytest.raises(rlxjax.TargetError, match="unknown target 'iOS99'"):
        rlxjax.coreml_train_step(lambda p, x: (p * x).sum(), None, target="iOS99")
