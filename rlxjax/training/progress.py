"""The progress bars of ``TrainStep.fit`` and of long compiles (tqdm).

On a terminal or in a notebook it redraws in place. Anywhere else (a log file, a pipe, a
CI console) redrawing would pile every update onto one line of ``\\r``s, so there it writes
a plain line at most every ``LOG_INTERVAL`` seconds, and the final state."""
from __future__ import annotations

import sys

from tqdm import tqdm

LOG_INTERVAL = 30.0  # seconds between lines when the stream is not interactive


def _interactive(stream) -> bool:
    if type(stream).__module__.startswith("ipykernel"):  # a Jupyter kernel's stderr
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Lines:
    """A file for tqdm that turns each redraw ('\\r' + status) into a line of its own."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, s: str) -> None:
        s = s.replace("\r", "").rstrip()
        if s:
            self.stream.write(s + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(total: int, enabled: bool = True, stream=None) -> tqdm:
    """A tqdm bar over ``total`` steps on ``stream`` (stderr); prints nothing unless
    ``enabled``."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return tqdm(total=total, disable=True)
    if _interactive(stream):
        return tqdm(total=total, file=stream, unit="step", dynamic_ncols=True)
    return tqdm(total=total, file=_Lines(stream), unit="step", ascii=True, ncols=80,
                mininterval=LOG_INTERVAL, maxinterval=LOG_INTERVAL)


#: seconds a long task runs before its bar appears (a short one prints nothing)
TASK_DELAY = 5.0


def progress_items(items, desc: str, stream=None):
    """``items``, with a tqdm bar named ``desc`` on ``stream`` (stderr) if iterating them
    takes longer than ``TASK_DELAY`` seconds (a compile baking a large model's weights);
    ``TQDM_DISABLE=1`` silences it."""
    stream = sys.stderr if stream is None else stream
    kwargs = dict(total=len(items), desc=desc, unit="leaf", delay=TASK_DELAY, leave=False)
    if _interactive(stream):
        return tqdm(items, file=stream, dynamic_ncols=True, **kwargs)
    return tqdm(items, file=_Lines(stream), ascii=True, ncols=80, mininterval=LOG_INTERVAL,
                maxinterval=LOG_INTERVAL, **kwargs)
