"""A Ctrl-C that cannot tear a training step in two.

A ``state="mlstate"`` step updates the device state in place and then advances the host's
step counter and version (training/step.py): a ``KeyboardInterrupt`` landing between the two
would leave a TrainState that reads the next step's values under the previous step's number.
``held_interrupt`` holds the first Ctrl-C until the step is complete (device and counter
advanced together) and raises it then; a second Ctrl-C inside the step is raised at once,
before the step completes (the state then stays the one passed in: the reference backend
commits a run's state writes only when the run completes, coreml/interpreter/interpreter.py).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


@contextlib.contextmanager
def held_interrupt() -> Iterator[None]:
    """Hold SIGINT for the duration of the block (main thread only; elsewhere, or when the
    program ignores SIGINT, a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):
        yield
        return
    held = []

    def hold(signum, frame):
        if held:  # a second Ctrl-C: the user means it
            raise KeyboardInterrupt
        held.append((signum, frame))

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        if callable(previous):
            previous(*held[0])
        else:  # SIG_DFL
            raise KeyboardInterrupt
