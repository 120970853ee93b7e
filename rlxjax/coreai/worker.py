"""Run a Core AI program in a worker process: ``python -m rlxjax.coreai.worker ASSET FUNCTION
IN.npz OUT.npz``. Apple's runtime ends the process on some bad programs (SIGILL, SIGABRT,
SIGSEGV: the issue lists them), so rlxjax never runs it in the user's process: ``run``
starts this module, bounded in time, and turns a death into an error naming the program."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from typing import Dict

import numpy as np

from ..errors import RlxError

#: seconds one call may take (compile + load + run) before it counts as hung
TIMEOUT = float(os.environ.get("RLXJAX_COREAI_TIMEOUT", "120"))


class CoreAIRuntimeError(RlxError, RuntimeError):
    """Apple's Core AI runtime failed, died or hung running a program (a bug in rlxjax's
    Core AI lowering, or in the runtime: the message names the program and the signal)."""


def run(path: str, function: str, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory(prefix="rlxjax-coreai-") as tmp:
        fin, fout = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(fin, **feeds)
        try:
            res = subprocess.run([sys.executable, "-m", __name__, path, function, fin, fout],
                                 capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CoreAIRuntimeError(f"the Core AI runtime did not finish {function} of "
                                     f"{path} within {TIMEOUT:g} s") from None
        if res.returncode != 0:
            how = (f"died with {signal.Signals(-res.returncode).name}" if res.returncode < 0
                   else f"failed (exit {res.returncode})")
            tail = "\n".join((res.stderr or "").strip().splitlines()[-6:])
            raise CoreAIRuntimeError(f"the Core AI runtime {how} running {function} of "
                                     f"{path}:\n{tail}")
        with np.load(fout) as z:
            return {k: z[k] for k in z.files}


def _main(argv) -> int:
    from .ca_private import run as run_here

    path, function, fin, fout = argv
    with np.load(fin) as z:
        feeds = {k: z[k] for k in z.files}
    np.savez(fout, **run_here(path, function, feeds))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
