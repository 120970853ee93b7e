"""The random-program fuzzer (tests/frontend/test_fuzz.py) on Apple's Core AI runtime:
the same random well-typed JAX programs compiled with ``format="aimodel"`` and judged by
the same oracle (tests/fuzz_check.py) with the same bound, no tolerance of its own. Core AI
sums and matmuls sequentially, but with values of at most 256 elements that stays inside
the bound: 40 forward and 30 gradient programs of the default derandomized sample passed
at the reference backend's RTOL = 1e-6 (issue 23: 0 wrong, 0 crash). A program rlxjax
refuses for Core AI (``RlxError``: a clear error naming what) is skipped, never counted as
a pass; a runtime death is a ``CoreAIRuntimeError`` and fails the test.

Every example is one Core AI compile in a worker process (~1-5 s here), so the default
suite runs 3 forward and 2 gradient programs; ``-m slow`` runs ``RLXJAX_FUZZ_EXAMPLES``
(default 40) fresh ones of each."""
from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_check import _one, check_grad, check_program
from fuzz_interp import Program
from fuzz_programs import programs
from helpers import examples
from rlxjax.errors import RlxError

pytest.importorskip("coreai")
from rlxjax.coreai.worker import CoreAIRuntimeError  # noqa: E402

_AIMODEL = {"format": "aimodel"}
_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
SAMPLE = settings(max_examples=examples(3), derandomize=True, **_COMMON)
LONG = settings(max_examples=int(os.environ.get("RLXJAX_FUZZ_EXAMPLES") or 40),
                derandomize=False, database=None, **_COMMON)


def _on_coreai(check, prog):
    try:
        _one(functools.partial(check, **_AIMODEL), prog)
    except CoreAIRuntimeError:
        raise
    except RlxError as e:  # refused with a clear error: not a pass, not a failure
        pytest.skip(f"refused for Core AI: {str(e).splitlines()[0]}")


@SAMPLE
@given(programs(loops=True))
def test_coreai_fuzz_jit(case):
    _on_coreai(check_program, case[0])


# ~10 s; random programs' gradients stay in the default run on Core ML
# (tests/frontend/test_fuzz.py), random programs on Core AI in test_coreai_fuzz_jit
@pytest.mark.slow
@settings(SAMPLE, max_examples=2)
@given(programs())
def test_coreai_fuzz_grad(case):
    _on_coreai(check_grad, case[0])


@pytest.mark.slow
@LONG
@given(programs(max_steps=14, loops=True))
def test_coreai_fuzz_jit_long(case):
    _on_coreai(check_program, case[0])


@pytest.mark.slow
@LONG
@given(programs(max_steps=14))
def test_coreai_fuzz_grad_long(case):
    _on_coreai(check_grad, case[0])


# Found by test_coreai_fuzz_grad_long: a batch norm over one element per channel (rank-1
# input, channel axis 0: nothing to reduce) normalised the whole vector on Core AI, forward
# and gradient (-0.83, 223 where JAX gives -0.024, -0.90): Core AI's reductions read an
# empty axis list as every axis. ops_base.Ctx.reduce now returns its input for no axes.
BATCH_NORM_ONE_PER_CHANNEL = Program(
    inputs=[((2,), "f")],
    steps=[("batch_norm_train", [0], {"axis": 0, "eps": 1e-05, "seed": 0, "which": 0}),
           ("neg", [1], {})],
    outputs=[2], seed=0)


@pytest.mark.parametrize("check", [check_program, check_grad], ids=["jit", "grad"])
def test_coreai_reduction_over_no_axes(check):
    _on_coreai(check, BATCH_NORM_ONE_PER_CHANNEL)
