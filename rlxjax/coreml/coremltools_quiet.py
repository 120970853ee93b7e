"""Import coremltools without its off-macOS notices.

Off macOS coremltools logs "Failed to load ..." for each of its runtime classes at import.
That is expected here (programs run on the reference backend), so exactly those import-time
records are dropped; everything else coremltools logs still shows. Imported first by the
modules through which a user first reaches coremltools (format.py, the reference
interpreter, rlxjax inspect).
"""
import logging as _logging


class _NoRuntimeNotice(_logging.Filter):
    def filter(self, record):
        return "libcoremlpython" not in record.getMessage()


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
