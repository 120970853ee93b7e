"""A clear error before an out-of-memory: what baking a frozen base will need, against what
the machine has free.

Before ``step.init`` bakes the frozen leaves (frozen.py), ``check_frozen_budget`` estimates
the memory the compile needs beyond what the process already holds (the user's parameters
are resident already) from the leaves' shapes alone:

* ``OVERHEAD`` and ``GRAPH_SHARE`` of the frozen fp32 bytes for the compiler itself
  (tracing, the RLX graph, the program; measured: about 180 MiB beyond the parameters for
  Qwen2.5-0.5B's 1.9 GiB, bench/RESULTS.md);
* the largest leaf's payload and a few quantiser pieces: each leaf is quantised, written to
  the weight store (rlxjax/weightstore.py) and dropped before the next;
* Core AI: the program's constants are views of the weight store (coreai/weights.py), and
  writing the ``.aimodel`` reads every one of them into the process once - the stored
  payload (coreai-core's serialiser holds the interpreter while it writes: the pages
  cannot be dropped as they are written, as the Core ML writers do).

and compares it with the memory the kernel says is available (``MemAvailable`` of
/proc/meminfo; elsewhere ``os.sysconf`` free pages). Over it, ``OutOfMemoryRisk`` says how
much is needed and what to do. ``RLXJAX_MEMORY_CHECK=0`` skips the check (the estimate is
an estimate).
"""
from __future__ import annotations

import os
from typing import Iterable, Optional

import numpy as np

from ..compression import CHUNK, compressible
from ..errors import RlxError

OVERHEAD = 64 << 20
GRAPH_SHARE = 0.05
#: bytes a quantiser piece's temporaries take (fp32 and float64 copies of CHUNK values)
PIECE = CHUNK * 32
ENV = "RLXJAX_MEMORY_CHECK"

#: bytes per value each scheme stores (int4: two values a byte and a fp32 scale per 32;
#: Core AI keeps palettize4 indices in 8-bit containers)
_STORED = {None: 4, "fp16": 2, "int8": 1, "int4": 0.625, "palettize4": 1, "palettize8": 1}


class OutOfMemoryRisk(RlxError, MemoryError):
    """Compiling would need more memory than the machine has available."""


def available_bytes() -> Optional[int]:
    """Memory the kernel can give this process now (None if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(leaves: Iterable, compress: Optional[str], fmt_name: str) -> int:
    """Bytes the compile needs beyond the frozen ``leaves`` themselves (module docstring)."""
    largest = stored = dense = 0
    for leaf in leaves:
        arr = np.asarray(leaf) if not hasattr(leaf, "shape") else leaf
        n = int(np.prod(arr.shape, dtype=np.int64))
        scheme = compress if compress is not None and compressible(arr) else None
        size = int(n * _STORED.get(scheme, 4))
        stored += size
        dense += 4 * n
        largest = max(largest, size)
    need = OVERHEAD + int(GRAPH_SHARE * dense) + largest + 2 * PIECE
    if fmt_name == "aimodel":
        need += stored
    return need


def check_frozen_budget(leaves, compress: Optional[str], fmt_name: str,
                        available: Optional[int] = None) -> int:
    """Raise ``OutOfMemoryRisk`` when the estimate exceeds the available memory; returns
    the estimate."""
    leaves = list(leaves)
    need = estimate(leaves, compress, fmt_name)
    if os.environ.get(ENV, "1") == "0":
        return need
    free = available_bytes() if available is None else available
    if free is not None and need > free:
        gib = lambda b: f"{b / 2 ** 30:.1f} GiB"  # noqa: E731
        hints = []
        if compress in (None, "fp16"):
            hints.append("store the frozen base compressed (compress='int8' or 'int4')")
        if fmt_name == "aimodel":
            hints.append("compile the Core ML format, which streams the weights to its "
                         "weight file (format='mlpackage')")
        hints.append("close other programs")
        raise OutOfMemoryRisk(
            f"baking the frozen parameters into the {fmt_name} program needs about "
            f"{gib(need)} more memory, and this machine has {gib(free)} available: "
            f"{'; or '.join(hints)}. The figure is an estimate (rlxjax/training/budget.py); "
            f"set {ENV}=0 to compile anyway")
    return need
