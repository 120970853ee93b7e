"""Call-time argument checks, once for every way a program is called.

A compiled function (``Compiled.__call__``) and a loaded package (``rlxjax.load``) take
host values and feed a program whose signature is fixed (rlxjax/signature.py): both
canonicalise each value as JAX would see it, check its shape and dtype against the
feature's (a flexible axis within its bounds, all axes of one size agreeing), zero-size
leaves against their known shapes, and refuse a -NaN in an input that reaches a ``top_k``.
A new call-time check goes here, so that both paths make it.
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from . import flexible
from .errors import ArgumentError
from .frontend import nan_sign
from .frontend.rules.random import reject_prng_key
from .signature import IOSpec

_CANONICAL = frozenset(np.dtype(t) for t in (
    np.float32, np.float16, np.int32, np.bool_, np.int8, np.uint8, np.int16, np.uint16,
    np.uint32))

#: what a compiled function's shape / dtype errors tell the caller to do
RECOMPILE_HINT = ("pass that shape and dtype, or call the coreml_jit function itself (it "
                  "compiles once per signature)")


def canonical(x) -> np.ndarray:
    """A call argument as the array JAX would see (python scalars weakly typed, 64-bit
    types narrowed unless x64 mode is on, in which case the dtype check rejects them)."""
    if type(x) is np.ndarray and x.dtype in _CANONICAL:
        return x  # the common case, already what JAX would see (and never a PRNG key)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        dt = {bool: np.bool_, int: np.int32, float: np.float32}[type(x)]
        return np.asarray(x, dtype=dt)
    reject_prng_key(x, "an argument")
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def is_key(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def leaf_sig(x):
    """(shape, dtype) of a call argument leaf as JAX sees it: a typed PRNG key keeps its
    key dtype (it is no program input; only a dead one compiles, frontend/random/)."""
    if is_key(x):
        return tuple(x.shape), x.dtype
    arr = canonical(x)
    return arr.shape, arr.dtype


def fits(spec: IOSpec, shape, dtype) -> bool:
    """Whether a value of ``shape`` and ``dtype`` is what input ``spec`` takes (a flexible
    axis: any size within its bounds)."""
    return np.dtype(dtype).name == spec.dtype and (
        tuple(shape) == spec.shape or (spec.flexible and flexible.fits(spec, shape)))


def given_type(value, shape, dtype) -> str:
    """How an error names the type of ``value`` that JAX sees as ``dtype[shape]``: with the
    value's own dtype when canonicalisation changed it ("int64[3] (int32 as JAX takes it)")."""
    own = getattr(value, "dtype", None)
    try:
        own = None if own is None else np.dtype(own).name
    except TypeError:
        own = None
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    except TypeError:  # not a numpy dtype: a JAX key type (key<fry>)
        name = str(dtype)
    if own is None or own == name:
        return f"{name}{list(shape)}"
    return f"{own}{list(shape)} ({name} as JAX takes it)"


def mismatch(what: str, name: str, shape, dtype, want_shape, want_dtype, *,
             takes: bool = False, note: str = "", hint: str = RECOMPILE_HINT,
             value=None) -> ArgumentError:
    """The error for a value of the wrong shape or dtype: ``what`` 'argument' (a compiled
    function's) or 'input' (a package's feature); ``takes``: say what the program takes,
    not what it was compiled for; ``note`` follows the wanted type; ``value``: the value
    as given, whose own dtype is named when JAX's canonicalisation changed it."""
    want = "the program takes" if takes else "the program was compiled for"
    got = given_type(value, shape, dtype) if value is not None else f"{dtype}{list(shape)}"
    return ArgumentError(f"{what} '{name}' is {got}, but {want} "
                         f"{want_dtype}{list(want_shape)}{note}" + (f"; {hint}" if hint else ""))


def u32_as_i32(spec: IOSpec, leaf, shape, dtype) -> np.ndarray:
    """A uint32 argument the program carries as int32: its values must be < 2**31."""
    if shape != spec.shape or dtype != np.uint32:
        raise mismatch("argument", spec.name, shape, dtype, spec.shape, "uint32")
    arr = canonical(leaf)
    if arr.size and int(arr.max()) > np.iinfo(np.int32).max:
        raise ArgumentError(
            f"argument '{spec.name}' holds {int(arr.max())} >= 2**31: Core ML has no uint32, "
            "and the program carries this uint32 argument as int32, which holds values "
            "below 2**31 only")
    return arr.astype(np.int32)


def check_sizes(specs: Sequence[IOSpec], shapes) -> None:
    """Flexible inputs: each size within its bounds, one size per flexible dim."""
    if any(s.flexible for s in specs):
        flexible.check_sizes(specs, shapes)


def check_nan_sign(name: str, where: str, arr: np.ndarray) -> None:
    """Refuse a -NaN in an input whose values reach a ``top_k`` (frontend/nan_sign.py)."""
    nan_sign.check(name, where, arr)
