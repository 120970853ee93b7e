"""Import coremltools without its off-macOS notices.

Off macOS coremltools logs "Failed to load ..." for each of its runtime classes at import.
That is expected here (programs run on the reference backend), so exactly those import-time
records are dropped, as are its notices that an installed scikit-learn / TensorFlow / torch
is a version its *converters* do not support (rlxjax uses none of them; scikit-learn comes
with rlxjax[flower]); everything else coremltools logs still shows. Imported first by the
modules through which a user first reaches coremltools (format.py, the reference
interpreter, rlxjax inspect).
"""
import logging as _logging


class _NoRuntimeNotice(_logging.Filter):
    def filter(self, record):
        msg = record.getMessage()
        return "libcoremlpython" not in msg and "is not supported. Minimum required" not in msg


def _import_coremltools_quietly():
    handlers = [h for h in (_logging.lastResort, *_logging.getLogger().handlers) if h]
    notice = _NoRuntimeNotice()
    for h in handlers:
        h.addFilter(notice)
    try:
        import coremltools  # noqa: F401
    finally:
        for h in handlers:
            h.removeFilter(notice)


_import_coremltools_quietly()
