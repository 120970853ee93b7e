"""Import coremltools without its off-macOS notices.

Off macOS coremltools logs "Failed to load ..." for each of its runtime classes at import.
That is expected here (programs run on the reference backend), so exactly those import-time
records are dropped, as are its notices that an installed scikit-learn / TensorFlow / torch
is a version its *converters* do not support (rlxjax uses none of them; scikit-learn comes
with rlxjax[flower]); everything else coremltools logs still shows. Imported first by the
modules through which a user first reaches coremltools (coreml/format.py, the reference
interpreter, rlxjax inspect, the compress= quantisers both formats use:
compression/ct_optimize.py).

coremltools looks for scikit-learn at import (``coremltools._deps``) only to enable its
scikit-learn converters, and disables them for a scikit-learn newer than the newest it
supports (``_SKLEARN_MAX_VERSION``; 1.5.1 for coremltools 9). Importing a newer one costs
about 2 s of a first compile for nothing, so then it is not imported: the import fails for
coremltools alone (``_HAS_SKLEARN`` False, as it would have set it), and scikit-learn imports
as usual afterwards.
"""
import importlib.metadata as _metadata
import importlib.util as _util
import logging as _logging
import os as _os
import re as _re
import sys as _sys


class _NoRuntimeNotice(_logging.Filter):
    def filter(self, record):
        msg = record.getMessage()
        return "libcoremlpython" not in msg and "is not supported. Minimum required" not in msg


def _import_coremltools_quietly():
    handlers = [h for h in (_logging.lastResort, *_logging.getLogger().handlers) if h]
    notice = _NoRuntimeNotice()
    for h in handlers:
        h.addFilter(notice)
    skip = _sklearn_unsupported()
    if skip:
        _sys.modules["sklearn"] = None  # `import sklearn` raises ImportError
    try:
        import coremltools  # noqa: F401
    finally:
        if skip and _sys.modules.get("sklearn", 0) is None:
            del _sys.modules["sklearn"]
        for h in handlers:
            h.removeFilter(notice)


def _version(text):
    return tuple(int(x) for x in _re.findall(r"\d+", text)[:2])


def _sklearn_unsupported() -> bool:
    """Whether scikit-learn is installed, not imported yet, and newer than the newest
    version the installed coremltools supports (read from its ``_deps``, not imported)."""
    if "sklearn" in _sys.modules:
        return False
    try:
        installed = _metadata.version("scikit-learn")
        spec = _util.find_spec("coremltools")
        with open(_os.path.join(_os.path.dirname(spec.origin), "_deps", "__init__.py")) as f:
            top = _re.search(r'_SKLEARN_MAX_VERSION\s*=\s*"([^"]+)"', f.read())
    except (OSError, ValueError, AttributeError, TypeError, _metadata.PackageNotFoundError):
        return False
    return top is not None and _version(installed) > _version(top.group(1))


_import_coremltools_quietly()
