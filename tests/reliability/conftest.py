"""tests/reliability/: fault injection on the files and processes a training app lives on
(docs/guarantees.md). Its shared module (rely_common) imports by plain name; packages are
saved once per session in both formats, and each test copies them before tampering."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rely_common import P, X, Y, make_step, predict  # noqa: E402


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """fmt -> {"io": path, "mlstate": path (with predict), "state": export_state folder of
    mlstate}."""
    root = tmp_path_factory.mktemp("saved")
    cache = {}

    def get(fmt):
        if fmt not in cache:
            out = {}
            for mode in ("io", "mlstate"):
                step = make_step(fmt, mode)
                st, _ = step(step.init(P, X, Y), X, Y)
                # the mlstate package with predict: a multifunction package sharing states
                out[mode] = step.save(str(root / f"{mode}.{fmt}"), **(
                    {"predict": (predict, X)} if mode == "mlstate" else {}))
                if mode == "mlstate":
                    out["state"] = step.export_state(st, str(root / f"state_{fmt}"))
            cache[fmt] = out
        return cache[fmt]

    return get


