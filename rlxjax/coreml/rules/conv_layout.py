"""Layout helpers of the conv lowerings (conv.py, conv_int.py): explicit padding and
dilation of the spatial dims, and batch groups rewritten as feature groups."""
from __future__ import annotations

from .common import lax_pad, reshape, transpose


def spatial_pad(b, x, config):
    """lax.pad-style (lo, hi, interior) zero padding of the spatial dims of [A, B, *S].
    A and B are merged first so that interior padding (which splits a dim) stays within
    Core ML's rank limit of 5 for 3-D convolutions."""
    a, c, *spatial = x.shape
    if all(cfg == (0, 0, 0) for cfg in config):
        return x
    flat = reshape(b, x, (a * c, *spatial))
    padded = lax_pad(b, flat, [(0, 0, 0)] + list(config), 0.0)
    return reshape(b, padded, (a, c, *padded.shape[1:]))


def batch_groups_to_feature_groups(b, x, groups):
    n, c, *spatial = x.shape
    y = reshape(b, x, (groups, n // groups, c, *spatial))
    y = transpose(b, y, (1, 0, *range(2, y.type.rank)))
    return reshape(b, y, (n // groups, groups * c, *spatial))
