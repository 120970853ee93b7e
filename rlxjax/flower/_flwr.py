"""Flower (``flwr``) is an optional extra: a clear error when it is missing or too old."""
from __future__ import annotations

import importlib.metadata

from ..errors import BackendUnavailableError

INSTALL = 'pip install "rlxjax[flower]"'
#: the Flower release line rlxjax.flower was written and tested against (pyproject pins it)
TESTED = "1.42"


def require(dist: str = "flwr", what: str = "rlxjax.flower") -> str:
    """The installed version of ``dist``; BackendUnavailableError naming the extra when it
    is missing (or, for flwr, older than the Message API rlxjax.flower uses)."""
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise BackendUnavailableError(f"{what} needs {dist} (Flower), which is not "
                                      f"installed: {INSTALL}") from None
    if dist == "flwr":
        major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
        if major_minor < (1, 42):
            raise BackendUnavailableError(
                f"{what} was written against flwr {TESTED} (the Message API: ClientApp, "
                f"ServerApp, flwr.serverapp.strategy); found flwr {version}: {INSTALL}")
    return version
