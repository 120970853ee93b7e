"""The compress= schemes are named once, format-neutral (rlxjax/compression/schemes.py): the
weight node's schema, Core ML's target table and both formats' checks agree on them, and an
unknown name is the same clear error on either format."""
from __future__ import annotations

import pytest

from rlxjax import formats
from rlxjax.compression import schemes
from rlxjax.errors import ArgumentError
from rlxjax.ir import weight


def test_every_table_names_the_same_schemes():
    from rlxjax.coreml.compress import SCHEMES as COREML_TARGETS

    assert tuple(COREML_TARGETS) == schemes.SCHEMES
    assert weight.SCHEMES == ("none",) + schemes.SCHEMES


@pytest.mark.parametrize("fmt", ["mlpackage", "aimodel"])
def test_an_unknown_scheme_is_refused_alike(fmt):
    f = formats.get(fmt)
    newest = "iOS27" if fmt == "aimodel" else "iOS18"
    with pytest.raises(ArgumentError, match=r"compress='int2': choose one of fp16, int8, "
                                            r"int4, palettize4, palettize8"):
        f.check_compression("int2", newest)
    for name in schemes.SCHEMES:  # a known name on the format's newest target passes
        f.check_compression(name, newest)


def test_the_quantisers_import_coremltools_quietly():
    """A Core AI step with compress= reaches coremltools through the quantisers alone (no
    Core ML module first): its off-macOS import notices stay dropped there too."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import numpy as np\n"
            "from rlxjax.compression.schemes import compress_leaf\n"
            "w = np.arange(64, dtype=np.float32).reshape(8, 8)\n"
            "assert compress_leaf(w, 'palettize4').value.shape == (8, 8)\n"
            "import sys; assert 'rlxjax.coreml' not in sys.modules\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(Path(__file__).resolve().parents[2]))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "libcoremlpython" not in res.stderr, res.stderr[-2000:]
