"""The whole compile's work grows with the program, not faster (issue 36): a LoRA-style
train step (an int8-frozen base, the embedding trained) of a Llama-style decoder at depth L
and 2L, every Python function call of the compile counted by a ``sys.setprofile`` hook and
attributed to the rlxjax module (or library) whose code it runs - tracing (frontend/*, jax,
flax, optax), the graph passes (transforms/*, ir/*), the frozen base's baking, the lowering
and the MIL passes (coreml/*) - counted, not timed, so the bound holds on a loaded machine.

Work linear in the depth, a + b L, grows at most 2x from L to 2L (the embedding and the
loss are the fixed part a: from 2 to 4 layers the ops grow ~1.5x); a pass quadratic in the
program would grow up to 4x. Every module's count must stay within 2.2x (measured from 2
to 4 layers: 1.24-1.93x per module, flax's tracing of the layers the highest) and the total
within 1.3x the ops' growth (1.62x for 1.51x). The default run compares 1 and 2 layers (~4 s
of CPU), the slow one 2 and 4. What this does not catch: a quadratic term small at these
depths (the ops grow 1.34x from 1 to 2 layers, 1.51x from 2 to 4 - a term quadratic in the
ops grows 1.8x / 2.3x, under the per-module bound unless it dominates its module). Counting
calls sees Python loops over ops (each visit calls something) but not the elements a
vectorised numpy call touches: coreml/mil_order_refine.py's evaluated orders are O(n) numpy
passes each, bounded by tests/memory/test_order_work.py. A compile of depth 1 first warms
jax's and rlxjax's caches, so that neither measured compile pays for first-time work."""
from __future__ import annotations

import collections
import os
import sys

import jax
import optax
import pytest

import rlxjax

from test_order_work import decoder_lm

_BOUND = 2.2  # linear work: <= 2x from depth 2 to 4; quadratic: up to 4x
_ROOT = os.path.dirname(os.path.abspath(rlxjax.__file__)) + os.sep


def _bucket(filename: str) -> str:
    """The module (rlxjax) or the library (anything else) of a code object's file."""
    if filename.startswith(_ROOT):
        return "rlxjax/" + filename[len(_ROOT):]
    parts = filename.split(os.sep)
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    return "other"


def _count_calls(fn):
    counts: collections.Counter = collections.Counter()
    names: dict = {}

    def hook(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
        elif event == "c_call":
            f = frame.f_code.co_filename  # a builtin / C call: the caller's module
        else:
            return
        b = names.get(f)
        if b is None:
            b = names[f] = _bucket(f)
        counts[b] += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def _compile(layers: int):
    params, tokens, loss = decoder_lm(layers)

    def trained(path, leaf):
        return "Embed" in jax.tree_util.keystr(path)

    ops = []

    def run():
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), trainable=trained,
                                        compress="int8")
        step.init(params, tokens)
        ops.append(sum(len(b.operations) for b in _blocks(step)))

    return _count_calls(run), ops[0]


def _blocks(step):
    from rlxjax.coreml.mil import blocks

    return list(blocks(step.last_compiled.spec))


@pytest.mark.parametrize("depth", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_compile_work_grows_linearly_with_depth(depth):
    _compile(1)  # warm-up: jax's caches, first imports
    (small, n_small), (big, n_big) = _compile(depth), _compile(2 * depth)
    ratio = n_big / n_small
    assert 1.2 < ratio < 2.2, (n_small, n_big)  # the program grew with its layers
    total_small, total_big = sum(small.values()), sum(big.values())
    # the total within 1.3x the ops' growth (measured 1.10x at 1 -> 2 layers, 1.07x at 2 -> 4)
    assert total_big <= 1.3 * ratio * total_small, (total_small, total_big, ratio)
    worst = []
    for name, count in small.items():
        if count < 2000:  # a fixed cost: too small to show a growth
            continue
        worst.append((big[name] / count, name, count, big[name]))
        assert big[name] <= _BOUND * count, (name, count, big[name])
    assert worst, "no module did enough work to measure"


if __name__ == "__main__":  # python tests/memory/test_compile_work.py: each module's counts
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    _compile(1)
    (s, ns), (b, nb) = _compile(depth), _compile(2 * depth)
    print(f"ops {ns} -> {nb} ({nb / ns:.2f}x); total calls {sum(s.values()):,} -> "
          f"{sum(b.values()):,} ({sum(b.values()) / sum(s.values()):.2f}x)")
    for name in sorted(s, key=lambda k: -b[k] / max(s[k], 1)):
        if s[name] >= 2000:
            print(f"{name:<50} {s[name]:>10,} {b[name]:>10,} {b[name] / s[name]:6.2f}x")
