"""Run one function of a saved ``.aimodel`` directly on the Core AI runtime (``coreai.runtime``
in this process, no rlxjax worker): what an app pays per call. For the decode benches.

``time_decode(path, prefill_inputs, n)`` loads the asset's ``prefill`` and ``decode`` functions
on one set of zero states (the names and shapes the asset's rlxjax metadata gives; the
states of the functions of one asset are one state), calls ``prefill`` once and ``decode``
``n`` times greedily, and returns the seconds of each decode call and the tokens.
``profile_decode`` adds Core AI's own profile of one decode call, summed by op type.
"""
from __future__ import annotations

import asyncio
import collections
import re
import time

import numpy as np


def _states(path: str, function: str):
    from rlxjax.coreai.loaded import LoadedAIModel

    m = LoadedAIModel(path, function=function)
    return {r["mil_name"]: np.zeros(tuple(r["shape"]), r["dtype"]) for r in m._state_rows}


def _op_type(eid, data):
    m = re.search(r"coreai\.([a-z_0-9.]+)", data or "") or re.search(r"coreai\.([a-z_0-9.]+)",
                                                                      eid or "")
    return m.group(1).rpartition(".")[2] if m else (eid or "?")


async def _decode(path, prefill_feeds, n, state_init=None, profile=False):
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray, Profiler

    states = state_init if state_init is not None else _states(path, "decode")
    st = {k: NDArray(np.ascontiguousarray(v)) for k, v in states.items()}
    spans = collections.Counter()
    prof = None
    if profile:
        begins, counter = {}, iter(range(1 << 30))

        def begin(ev):
            i = next(counter)
            begins[i] = (ev.timestamp, ev.event_id, ev.data)
            return i

        def end(ev, i):
            t0, eid, data = begins.pop(i)
            spans[_op_type(eid, data)] += ev.timestamp - t0

        prof = Profiler(on_log_event_begin=begin, on_log_event_end=end)
    async with AIModelAsset.load(path).executable() as model:
        pre = model.load_function("prefill")
        dec = model.load_function("decode", profiler=prof) if profile else \
            model.load_function("decode")
        feeds = dict(zip(pre.desc.input_names, prefill_feeds))  # positional
        out = await pre({k: NDArray(np.ascontiguousarray(v)) for k, v in feeds.items()},
                        state=st)
        logits = np.array(next(iter(out.values())).numpy())
        times, toks = [], []
        for i in range(n):
            t = np.argmax(logits.reshape(-1, logits.shape[-1])[-1]).astype(np.int32)
            toks.append(int(t))
            if profile and i == n - 1:
                spans.clear()
            t0 = time.perf_counter()
            out = await dec({dec.desc.input_names[0]: NDArray(t.reshape(1, 1))}, state=st)
            times.append(time.perf_counter() - t0)
            logits = np.array(next(iter(out.values())).numpy())
    return times, toks, spans


def time_decode(path, prefill_feeds, n, state_init=None):
    times, toks, _ = asyncio.run(_decode(path, prefill_feeds, n, state_init))
    return times, toks


def profile_decode(path, prefill_feeds, n, state_init=None):
    """The profile of the last of ``n`` decode calls: seconds per op type."""
    return asyncio.run(_decode(path, prefill_feeds, n, state_init, True))[2]
