"""A loaded package's function, format-neutral: its values in and out, checked (calling.py).

A format's loader (``Format.load``) reads the package and subclasses ``LoadedFunction``
with how to run it (``_run``, ``_make_state``); everything about values is here: inputs by
feature name (keyword) or in declaration order (positional), checked by rlxjax/calling.py;
with rlxjax's metadata (``rlxjax.io``, rlxjax/metadata.py) the JAX-side shapes and dtypes,
zero-size leaves and NaN-sign checks, exactly as ``Compiled.__call__`` applies them;
without it (a package rlxjax did not write), the format's feature shapes.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from . import calling, metadata, stateful
from .errors import ArgumentError


def _in_order(specs, empty):
    """(name, IOSpec or EmptyIO) of every input / output leaf, in the function's order."""
    it, out = iter(specs), []
    for k in range(len(specs) + len(empty)):
        if k in empty:
            out.append(empty[k])
        else:
            spec = next(it)
            out.append((spec.mil_name, spec))
    return out


def to_io(spec, x) -> np.ndarray:
    """A JAX-side argument -> the feature value the program is fed (python scalars and
    64-bit arrays canonicalized as ``Compiled.__call__`` does)."""
    arr = calling.canonical(x)
    if not calling.fits(spec, arr.shape, arr.dtype):
        raise calling.mismatch("input", spec.mil_name, arr.shape, arr.dtype.name, spec.shape,
                               spec.dtype, takes=True, hint="", value=x)
    return spec.to_feature(arr)


def _few(names, k: int = 4) -> str:
    shown = ", ".join(repr(n) for n in names[:k])
    return shown + (f" and {len(names) - k} more" if len(names) > k else "")


def _names_error(inputs, unknown, missing) -> ArgumentError:
    """A short error for inputs given by the wrong names; every name on ``.detail``."""
    parts = ([f"unknown input(s) {_few(unknown)}"] if unknown else []) + (
        [f"missing input(s) {_few(missing)}"] if missing else [])
    err = ArgumentError(f"{'; '.join(parts)}: the model takes {len(inputs)} inputs "
                        f"({_few(list(inputs))}; all of them, in order, on this error's "
                        ".detail and the model's input_names)")
    err.detail = (f"inputs, in order: {list(inputs)}\nunknown: {unknown}\n"
                  f"missing: {missing}")
    return err


class LoadedFunction:
    """One function of a loaded package: ``m(x=..., ...)`` or ``m(x, ...)`` -> dict."""

    path: str
    state_names: Tuple[str, ...] = ()
    _meta: dict = {}
    _feature_dtypes: Dict[str, np.dtype] = {}

    def _describe(self, meta, input_names, output_names) -> None:
        """Read the signature from the package metadata ``meta`` (the format's own feature
        names ``input_names`` / ``output_names`` when rlxjax did not write it)."""
        self._meta = meta
        self.input_specs, self.output_specs = metadata.read_io(meta)
        self.input_names, self.output_names = tuple(input_names), tuple(output_names)
        self._empty_in, self._empty_out = {}, {}
        if self.input_specs is not None:
            # zero-size leaves take their places among the features (frontend/zerosize.py)
            ein, eout = metadata.read_empty(meta, len(self.input_specs), len(self.output_specs))
            self._inputs = _in_order(self.input_specs, ein)
            self._outputs = _in_order(self.output_specs, eout)
            self._empty_in = {n: e for n, e in ein.values()}
            self._empty_out = {n: e for n, e in eout.values()}
            self.input_names = tuple(n for n, _ in self._inputs)
            self.output_names = tuple(n for n, _ in self._outputs)
        # inputs whose values reach a top_k: each call refuses a -NaN in them (nan_sign.py)
        self._nan_sign = metadata.read_str_dict(meta, metadata.NAN_SIGN)

    # -- the format's part -----------------------------------------------------------------
    def memory_analysis(self):
        """What a call needs in memory (``Compiled.memory_analysis``); formats that
        describe their program's values implement it."""
        raise ArgumentError(f"{type(self).__name__} does not describe its program's values: "
                            "no memory_analysis for this format yet")

    def _run(self, feeds, state=None):
        raise NotImplementedError

    def _make_state(self):
        raise NotImplementedError

    def _share(self, state) -> None:
        """Let this function bind ``state`` (made by another function of the package)."""

    # -- values ------------------------------------------------------------------------------
    def _feeds(self, args, kwargs) -> Dict[str, np.ndarray]:
        feeds = self._unchecked_feeds(args, kwargs)
        for name, where in self._nan_sign.items():
            if name in feeds:
                calling.check_nan_sign(name, where, feeds[name])
        return feeds

    def _unchecked_feeds(self, args, kwargs) -> Dict[str, np.ndarray]:
        if len(args) > len(self.input_names):
            raise ArgumentError(f"{len(args)} positional arguments given, the model takes "
                                f"{len(self.input_names)}: {list(self.input_names)}")
        given = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k in given:
                raise ArgumentError(f"input '{k}' given both positionally and by keyword")
            given[k] = v
        unknown = sorted(set(given) - set(self.input_names))
        missing = [n for n in self.input_names if n not in given]
        if unknown or missing:
            raise _names_error(self.input_names, unknown, missing)
        if self.input_specs is not None:
            for name, e in self._empty_in.items():
                arr = calling.canonical(given[name])
                if not e.matches(arr):
                    raise calling.mismatch("input", name, arr.shape, arr.dtype.name, e.shape,
                                           e.dtype, takes=True, hint="", value=given[name])
            feeds = {s.mil_name: to_io(s, given[s.mil_name]) for s in self.input_specs}
            calling.check_sizes(self.input_specs,
                                [feeds[s.mil_name].shape for s in self.input_specs])
            return feeds
        feeds = {}
        for name, v in given.items():
            arr = np.asarray(v)
            want = self._feature_dtypes.get(name)
            if want is not None and arr.dtype != want and np.can_cast(arr.dtype, want, "same_kind"):
                arr = arr.astype(want)
            feeds[name] = arr
        return feeds

    def make_state(self):
        if not self.state_names:
            raise ArgumentError(f"{self.path} has no states")
        return self._wrap_state(self._make_state())

    def _cache_states(self):
        """The states of the package's stateful functions (``rlxjax.stateful``: a KV cache,
        zero when a training step's export_state folder does not hold them)."""
        names = set()
        for fn in self.functions:
            meta = self.function(fn)._meta if fn != self.function_name else self._meta
            row = metadata.read(meta, metadata.STATEFUL, None)
            names.update(r["name"] for r in (row or {}).get("states", []))
        return names

    def _wrap_state(self, handle):
        """A stateful function's state (``rlxjax.stateful``): ``read()`` / ``write(values)``
        by leaf name (rlxjax/stateful.py); else the format's handle."""
        return stateful.wrap_loaded(handle, self._meta)

    def __call__(self, *args, state=None, **kwargs) -> Dict[str, np.ndarray]:
        if bool(self.state_names) != (state is not None):
            raise ArgumentError(
                f"the package has states {list(self.state_names)}: pass "
                "state=model.make_state()" if self.state_names else
                "the package has no states: call it without state=")
        state = stateful.unwrap(state)
        if state is not None:
            self._share(state)
        feeds = self._feeds(args, kwargs)
        res = self._run(feeds) if state is None else self._run(feeds, state=state)
        if self.output_specs is not None:
            return {name: (s.value() if name in self._empty_out else
                           s.from_feature(res[s.mil_name])) for name, s in self._outputs}
        return {n: np.asarray(res[n]) for n in self.output_names if n in res} or dict(res)
