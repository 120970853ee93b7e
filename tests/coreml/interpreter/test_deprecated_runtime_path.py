"""``rlxjax.runtime`` (the interpreter's and backends' old home, named in earlier docs) still
imports, with a DeprecationWarning, as the very modules that moved under rlxjax/coreml/."""
from __future__ import annotations

import importlib
import sys

import pytest


def test_the_old_paths_warn_and_are_the_moved_modules():
    for name in [m for m in sys.modules if m == "rlxjax.runtime" or
                 m.startswith("rlxjax.runtime.")]:
        del sys.modules[name]
    with pytest.warns(DeprecationWarning, match="rlxjax.coreml.interpreter"):
        old = importlib.import_module("rlxjax.runtime")
    from rlxjax.coreml import backends, interpreter
    from rlxjax.coreml.interpreter.liveness import LiveBytesProgram
    from rlxjax.coreml.interpreter.state import ReferenceStateError

    assert old.make_backend is backends.make_backend
    assert old.reference is interpreter
    assert importlib.import_module("rlxjax.runtime.reference.liveness").LiveBytesProgram \
        is LiveBytesProgram
    from rlxjax.runtime.reference.state import ReferenceStateError as Old

    assert Old is ReferenceStateError  # one class: an except clause catches either
