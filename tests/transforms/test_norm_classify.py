"""The norm classifier's label counting (transforms/norm_patterns/classify.py) counts the
distinct labels on a slice of the array: it must agree with np.unique of the whole."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxjax.transforms.norm_patterns import classify


@st.composite
def labelled(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    const = [d for d in range(len(shape)) if draw(st.booleans())]
    sub = tuple(1 if d in const else n for d, n in enumerate(shape))
    seed = draw(st.integers(0, 2 ** 16))
    values = np.random.default_rng(seed).integers(0, draw(st.integers(1, 6)), sub)
    return np.broadcast_to(values, shape).copy(), const


def _partition_whole(labels, reduced):
    """_is_axes_partition as it was: np.unique over every element."""
    if not all(classify._const_along(labels, d) for d in reduced):
        return False
    kept = [labels.shape[d] for d in range(labels.ndim) if d not in reduced]
    return len(np.unique(labels)) == int(np.prod(kept, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(labelled(), st.data())
def test_distinct_labels_and_partition_agree_with_the_whole_array(case, data):
    labels, const = case
    assert classify._n_distinct(labels, const) == len(np.unique(labels))
    reduced = data.draw(st.lists(st.sampled_from(range(labels.ndim)), unique=True))
    assert classify._is_axes_partition(labels, reduced) == _partition_whole(labels, reduced)
