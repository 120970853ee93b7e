import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    from rlxjax.runtime import is_macos

    skip = pytest.mark.skip(reason="needs Core ML's runtime (macOS only)")
    for item in items:
        if "coreml_runtime" in item.keywords and not is_macos():
            item.add_marker(skip)
