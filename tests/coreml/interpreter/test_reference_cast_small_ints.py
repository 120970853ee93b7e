"""The reference ``cast`` from int8 / uint8 (the iOS26 program boundary casts int8 inputs to
int32 and int32 outputs to int8, coremltools/smallint.py) against coremltools'
value_inference, on iOS17's cast (the first with 8-bit dtypes); values in the target's range,
as the lowering only casts those."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from _crosscheck import IOS17, cross_check
from test_reference_ops import SETTINGS, arrays, shapes

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-128, 255)}


@pytest.mark.parametrize("src", ["int8", "uint8", "int32"])
@SETTINGS
@given(data=st.data())
def test_cast_between_int32_and_8bit(src, data):
    dst = data.draw(st.sampled_from([d for d in ("int8", "uint8", "int32", "fp32", "bool")
                                     if d != src]))
    lo, hi = RANGES[src]
    if dst in RANGES and src == "int32":
        lo, hi = RANGES[dst]
    x = data.draw(arrays(np.dtype(src), data.draw(shapes()), lo, hi))
    cross_check("cast", {"x": x, "dtype": dst}, opset=IOS17)
