"""Tensor transformation / tensor operation / gather ops (coremltools iOS15 tensor_transformation.py,
tensor_operation.py, scatter_gather.py and their iOS16/iOS17 overrides)."""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import acc_dtype, get, norm_axis, out, to_bool, to_bool_list, to_int, to_int_list


@register("reshape")
def reshape(inputs):
    x = np.asarray(inputs["x"])
    to = to_int_list(inputs["shape"])
    if to.count(-1) > 1:
        raise ValueError(f"reshape target {to} has more than one -1")
    if 0 in to:
        # iOS17 semantics: a 0 copies the matching dim of x counted from the right (1 if none).
        # For equal ranks this is also the iOS15 rule (iOS15 rejects unequal ranks).
        rev_x = x.shape[::-1]
        to = [
            (rev_x[i] if i < len(rev_x) else 1) if d == 0 else d
            for i, d in enumerate(to[::-1])
        ][::-1]
    if -1 in to:
        rest = int(np.prod([d for d in to if d != -1], dtype=np.int64))
        to[to.index(-1)] = x.size // rest if rest else 0
    if int(np.prod(to, dtype=np.int64)) != x.size:
        raise ValueError(f"cannot reshape {x.shape} to {to_int_list(inputs['shape'])}")
    return (x.reshape(to),)


@register("transpose")
def transpose(inputs):
    x = np.asarray(inputs["x"])
    perm = to_int_list(inputs["perm"])
    if len(perm) != x.ndim:
        raise ValueError(f"perm {perm} does not match rank {x.ndim}")
    return (np.transpose(x, perm),)


@register("tile")
def tile(inputs):
    x = np.asarray(inputs["x"])
    reps = to_int_list(inputs["reps"])
    if len(reps) != x.ndim or any(r <= 0 for r in reps):
        raise ValueError(f"reps {reps} must be positive with one entry per dim of {x.shape}")
    return (np.tile(x, reps),)


@register("reverse")
def reverse(inputs):
    x = np.asarray(inputs["x"])
    axes = inputs.get("axes")
    axes = range(x.ndim) if axes is None else to_int_list(axes)
    for a in axes:
        x = np.flip(x, axis=a)
    return (x,)


@register("concat", tuple_inputs=("values",))
def concat(inputs):
    values = [np.asarray(v) for v in inputs["values"]]
    axis = to_int(inputs["axis"])
    if not values:
        raise ValueError("concat of zero values")
    if len({v.dtype for v in values}) != 1:
        raise TypeError(f"concat values differ in dtype: {[str(v.dtype) for v in values]}")
    if values[0].ndim == 0:  # rank-0 values concatenate into a vector
        return (np.stack(values),)
    if to_bool(get(inputs, "interleave", False)):
        # out[i::n] = values[i] along axis: stack just after axis, then merge the two dims.
        if len({v.shape for v in values}) != 1:
            raise ValueError("interleave=True needs values of identical shape")
        a = norm_axis(axis, values[0].ndim)
        stacked = np.stack(values, axis=a + 1)
        shape = list(values[0].shape)
        shape[a] *= len(values)
        return (stacked.reshape(shape),)
    return (np.concatenate(values, axis=axis),)


@register("stack", tuple_inputs=("values",))
def stack(inputs):
    values = [np.asarray(v) for v in inputs["values"]]
    if len({v.dtype for v in values}) != 1:
        raise TypeError(f"stack values differ in dtype: {[str(v.dtype) for v in values]}")
    return (np.stack(values, axis=to_int(inputs["axis"])),)


@register("split")
def split(inputs):
    x = np.asarray(inputs["x"])
    axis = to_int(inputs["axis"])
    sizes = inputs.get("split_sizes")
    if sizes is not None:
        sizes = to_int_list(sizes)
        if sum(sizes) != x.shape[axis]:
            raise ValueError(f"split_sizes {sizes} do not sum to dim {x.shape[axis]}")
    else:
        n = inputs.get("num_splits")
        if n is None:
            raise ValueError("split needs num_splits or split_sizes")
        n = to_int(n)
        if x.shape[axis] % n:
            raise ValueError(f"num_splits {n} does not divide dim {x.shape[axis]}")
        sizes = [x.shape[axis] // n] * n
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, cuts, axis=axis))


def slice_index(x, begin, end, stride, begin_mask, end_mask, squeeze_mask):
    """x[...] with the index slice_by_index means (Python slicing semantics, as coremltools'
    solve_slice_by_index_slice); accelerated/prepared.py calls it once on a probe to learn
    that index."""
    rank = x.ndim
    stride = stride or [1] * rank
    slices = []
    for i in range(rank):
        b = None if begin_mask and begin_mask[i] else begin[i]
        e = None if end_mask and end_mask[i] else end[i]
        s = stride[i]
        if squeeze_mask and squeeze_mask[i]:
            # Take exactly element `begin` (a stride larger than any dim, like coremltools).
            e, s = None, np.iinfo(np.int32).max
        slices.append(slice(b, e, s))
    return x[tuple(slices)]


@register("slice_by_index")
def slice_by_index(inputs):
    x = np.asarray(inputs["x"])
    begin, end = to_int_list(inputs["begin"]), to_int_list(inputs["end"])
    if len(begin) != x.ndim or len(end) != x.ndim:
        raise ValueError(f"begin {begin} / end {end} do not match rank {x.ndim}")
    opt = {}
    for k, conv in (("stride", to_int_list), ("begin_mask", to_bool_list),
                    ("end_mask", to_bool_list), ("squeeze_mask", to_bool_list)):
        opt[k] = None if inputs.get(k) is None else conv(inputs[k])
    res = slice_index(x, begin, end, **opt)
    squeeze_axes = tuple(i for i, m in enumerate(opt["squeeze_mask"] or []) if m)
    if squeeze_axes:
        res = np.squeeze(res, axis=squeeze_axes)
    return (np.asarray(res),)  # (ascontiguousarray would turn rank 0 into rank 1)


@register("slice_by_size")
def slice_by_size(inputs):
    x = np.asarray(inputs["x"])
    begin, size = to_int_list(inputs["begin"]), to_int_list(inputs["size"])
    if len(begin) != x.ndim or len(size) != x.ndim:
        raise ValueError(f"begin {begin} / size {size} do not match rank {x.ndim}")
    slices = []
    for i, (b, s) in enumerate(zip(begin, size)):
        b = b + x.shape[i] if b < 0 else b
        # size -1 means "to the end" (coremltools treats every size <= 0 that way).
        slices.append(slice(b, b + s) if s > 0 else slice(b, None))
    return (np.asarray(x[tuple(slices)]),)


@register("expand_dims")
def expand_dims(inputs):
    x = np.asarray(inputs["x"])
    axes = to_int_list(inputs["axes"])
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        if not 0 <= a < rank:
            raise ValueError(f"axis out of range in {axes} for output rank {rank}")
        shape.insert(a, 1)
    return (x.reshape(shape),)


@register("squeeze")
def squeeze(inputs):
    x = np.asarray(inputs["x"])
    axes = inputs.get("axes")
    if axes is None:
        return (np.squeeze(x),)
    return (np.squeeze(x, axis=tuple(to_int_list(axes))),)


@register("fill")
def fill(inputs):
    shape = to_int_list(inputs["shape"])
    value = np.asarray(get(inputs, "value", np.float32(0.0)))  # default 0.0 -> fp32
    return (np.full(shape, value, dtype=value.dtype),)


@register("range_1d")
def range_1d(inputs):
    start, end, step = (np.asarray(inputs[k]) for k in ("start", "end", "step"))
    if not start.dtype == end.dtype == step.dtype:
        raise TypeError("range_1d inputs must share one dtype")
    # np.arange on the scalars (float64 steps for floats), stored in the input dtype.
    return (out(np.arange(start[()], end[()], step[()]), start.dtype),)


@register("shape")
def shape(inputs):
    return (np.array(np.asarray(inputs["x"]).shape, dtype=np.int32),)


@register("pad")
def pad(inputs):
    x = np.asarray(inputs["x"])
    pads = to_int_list(inputs["pad"])
    mode = get(inputs, "mode", "constant")
    if len(pads) % 2 or len(pads) > 2 * x.ndim or any(p < 0 for p in pads):
        raise ValueError(f"bad pad {pads} for rank {x.ndim}")
    # pad lists (before, after) for the LAST len(pad)/2 dims.
    widths = [(0, 0)] * (x.ndim - len(pads) // 2) + list(zip(pads[::2], pads[1::2]))
    if mode == "constant":
        cval = np.asarray(get(inputs, "constant_val", 0.0))
        return (out(np.pad(x, widths, "constant", constant_values=cval), x.dtype),)
    if mode not in ("reflect", "replicate"):
        raise ValueError(f"unknown pad mode {mode!r}")
    return (np.pad(x, widths, "edge" if mode == "replicate" else "reflect"),)


@register("gather")
def gather(inputs):
    x, idx = np.asarray(inputs["x"]), np.asarray(inputs["indices"])
    axis = norm_axis(to_int(get(inputs, "axis", 0)), x.ndim)
    batch_dims = to_int(get(inputs, "batch_dims", 0))  # iOS16+
    idx = idx.astype(np.int64)
    if batch_dims == 0:
        return (np.asarray(np.take(x, idx, axis=axis)),)  # take may return a numpy scalar
    # Gather independently in every batch element (coremltools' compute_gather).
    bshape = x.shape[:batch_dims]
    if idx.shape[:batch_dims] != bshape:
        raise ValueError(f"batch dims of x {x.shape} and indices {idx.shape} differ")
    xs = x.reshape((-1,) + x.shape[batch_dims:])
    ids = idx.reshape((-1,) + idx.shape[batch_dims:])
    res = np.stack([np.take(p, i, axis=axis - batch_dims) for p, i in zip(xs, ids)])
    return (res.reshape(bshape + res.shape[1:]),)


@register("gather_along_axis")
def gather_along_axis(inputs):
    x, idx = np.asarray(inputs["x"]), np.asarray(inputs["indices"])
    axis = to_int(get(inputs, "axis", 0))
    if x.ndim != idx.ndim:
        raise ValueError(f"rank of x {x.shape} and indices {idx.shape} differ")
    n = x.shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise IndexError(f"indices out of range [-{n}, {n})")
    return (np.take_along_axis(x, idx.astype(np.int64), axis),)


@register("one_hot")
def one_hot(inputs):
    # No value_inference in coremltools.  MIL doc: indices -> one-hot vectors of length
    # one_hot_vector_size inserted at `axis`; out-of-range indices give all off_value.
    idx = np.asarray(inputs["indices"])
    depth = to_int(inputs["one_hot_vector_size"])
    on = np.asarray(get(inputs, "on_value", np.int32(1)))
    off = np.asarray(get(inputs, "off_value", np.int32(0)))
    if on.dtype != off.dtype:
        raise TypeError("on_value and off_value must share one dtype")
    axis = to_int(get(inputs, "axis", -1))
    axis = norm_axis(axis, idx.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        (depth,) + (1,) * (idx.ndim - axis))
    return (np.where(hot, on, off).astype(on.dtype),)


@register("cumsum")
def cumsum(inputs):
    x = np.asarray(inputs["x"])
    axis = to_int(get(inputs, "axis", 0))
    exclusive = to_bool(get(inputs, "exclusive", False))
    rev = to_bool(get(inputs, "reverse", False))
    data = x.astype(acc_dtype(x.dtype))  # fp16 accumulates in fp32, rounded once
    if rev:
        data = np.flip(data, axis=axis)
    data = np.cumsum(data, axis=axis, dtype=data.dtype)
    if exclusive:  # shift by one: element i holds the sum of elements before i
        zero_shape = list(data.shape)
        zero_shape[axis] = 1
        head = np.take(data, range(data.shape[axis] - 1), axis=axis)
        data = np.concatenate([np.zeros(zero_shape, data.dtype), head], axis=axis)
    if rev:
        data = np.flip(data, axis=axis)
    return (out(data, x.dtype),)


@register("band_part")
def band_part(inputs):
    x = np.asarray(inputs["x"])
    lower = to_int(get(inputs, "lower", -1))
    upper = to_int(get(inputs, "upper", -1))
    m, n = x.shape[-2:]
    d = np.arange(m)[:, None] - np.arange(n)[None, :]  # m - n
    band = ((lower < 0) | (d <= lower)) & ((upper < 0) | (-d <= upper))
    # Multiply (not where), like coremltools: keeps NaN*0 = NaN semantics of the reference.
    return (out(np.multiply(band.astype(x.dtype), x), x.dtype),)
