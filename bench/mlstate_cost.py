"""Core ML state steps against io steps, counted (issue 37, deliverable 2).

The four models of bench/coreai_speed.py (MLP, CNN, transformer, GPT-2-style; flax, adam),
each compiled as a Core ML training step (iOS18) twice: ``state="io"`` (parameters and
optimizer state in and out) and ``state="mlstate"`` (kept in the program's states, which
Core ML holds in fp16 only: the exact three-piece codec of rlxjax/states/mlstate_codec.py
encodes and decodes every fp32 value). Printed per step: non-const MIL ops and MB read +
written (coreml/cost.py's static model: no Mac here) and the estimated peak of temporaries
(``memory_analysis``). Run: ``python bench/mlstate_cost.py [MODEL ...]``; A/B against
another checkout with ``PYTHONPATH=<checkout> python bench/mlstate_cost.py``.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import optax  # noqa: E402

import rlxjax  # noqa: E402
from coreai_speed import MODELS  # noqa: E402


def main(argv=None):
    names = (sys.argv[1:] if argv is None else list(argv)) or list(MODELS)
    print(f"rlxjax from {os.path.dirname(rlxjax.__file__)}")
    print(f"{'model':12} {'ops io':>7} {'state':>6} {'st/io':>6} {'MB io':>9} {'state':>9} "
          f"{'st/io':>6} {'temp MiB io':>11} {'state':>7}")
    for name in names:
        _, params, _, loss, batch = MODELS[name]()
        got = {}
        for mode in ("io", "mlstate"):
            step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), state=mode,
                                            target="iOS18")
            step.init(params, *batch)
            cost = step.last_compiled.cost_analysis()
            got[mode] = (cost["mil_ops"], (cost["bytes_read"] + cost["bytes_written"]) / 1e6,
                         step.memory_analysis().temp_size_in_bytes / 2 ** 20)
        (oi, bi, ti), (os_, bs, ts) = got["io"], got["mlstate"]
        print(f"{name:12} {oi:7d} {os_:6d} {os_ / oi:6.2f} {bi:9.1f} {bs:9.1f} {bs / bi:6.2f} "
              f"{ti:11.2f} {ts:7.2f}", flush=True)


if __name__ == "__main__":
    main()
