"""The frozen / trainable split of a parameter tree (``trainable=``) and the baking of frozen
leaves into a traced program as ``weight`` nodes (rlxjax/ir/weight.py), possibly compressed
(``compress=``, rlxjax/compression/schemes.py). Used by training steps (trainable.py) and by
``export_inference(compress=)`` (compressed_export.py); see trainable.py for the design."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

import jax
import numpy as np

from ..compression import CompressionReport, ErrorMeter, error_of, leaf_report, row_runs
from ..errors import ArgumentError
from ..frontend import Traced, path_name
from ..transforms.rewrite import substitute
from ..weightstore import MIN_BYTES, WeightStore
from .layout import leaf_struct
from .nnx_filter import nnx_filter_mask
from .budget import check_frozen_budget
from .progress import progress_items

#: the params of a weight node that hold arrays (rlxjax/ir/weight.py)
_ARRAYS = ("value", "data", "scale", "lut")


def check_split_options(trainable, compress, target, fmt) -> None:
    """Refuse ``compress=`` without ``trainable=`` and a scheme the target (of format
    ``fmt``) lacks."""
    if trainable is None:
        raise ArgumentError(f"compress={compress!r} stores the frozen parameters compressed: "
                            "say which leaves are trained with trainable= (a pytree of bools "
                            "or a callable (path, leaf) -> bool); everything else is frozen")
    if compress is not None:
        fmt.check_compression(compress, target)


def resolve_mask(trainable, params) -> List[bool]:
    """One bool per leaf of ``params`` (flatten order): True where it is trained. An nnx
    filter (``nnx.LoRAParam``) on a tree of nnx Variables matches per Variable
    (nnx_filter.py)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    nnx_mask = nnx_filter_mask(trainable, params)  # nnx.LoRAParam on an nnx.State
    # a callable that is itself a pytree node (an equinox Module of bools, callable through
    # its __call__) is a mask, not the (path, leaf) -> bool function
    if nnx_mask is not None:
        mask = nnx_mask
    elif callable(trainable) and not isinstance(trainable, (bool, np.bool_)) and \
            jax.tree_util.treedef_is_leaf(jax.tree.structure(trainable)):
        mask = []
        for path, leaf in flat:
            m = trainable(path, leaf)
            if not isinstance(m, (bool, np.bool_)):
                raise ArgumentError(
                    f"trainable({path_name('params', path)!r}, leaf) returned "
                    f"{type(m).__name__} {m!r}: the callable must return True (train the "
                    "leaf) or False (freeze it)")
            mask.append(bool(m))
    else:
        try:
            full = jax.tree.broadcast(trainable, params)
        except (ValueError, TypeError) as e:
            raise ArgumentError(
                "trainable= must be a pytree of bools with the structure of params or a "
                f"prefix of it (as optax.masked takes), or a callable (path, leaf) -> bool; "
                f"it does not match params: {e}") from None
        leaves = jax.tree_util.tree_leaves(full)
        if len(leaves) != len(flat):
            raise ArgumentError(f"trainable= gives {len(leaves)} flags for {len(flat)} "
                                "parameter leaves: use the structure of params or a prefix")
        mask = []
        for (path, _), m in zip(flat, leaves):
            if not isinstance(m, (bool, np.bool_)):
                raise ArgumentError(
                    f"trainable= holds {type(m).__name__} {m!r} for "
                    f"'{path_name('params', path)}': every flag must be True or False")
            mask.append(bool(m))
    if not any(mask):
        raise ArgumentError("trainable= freezes every parameter: nothing is left to train "
                            "(use rlxjax.export_inference for a program without training)")
    return mask


def bake_leaf(name: str, leaf, compress: Optional[str], fmt=None, store=None):
    """(the values the program computes with, the params of its weight node, its
    compression report row) of the frozen leaf ``name`` (compressed by format ``fmt``).

    With a ``store`` (rlxjax/weightstore.py) the values and the payload are written to it
    as they are made - the dequantised values a run of rows at a time, measured against the
    original on the way for the report - and come back as read-only views of its file: the
    leaf is then held by the caller alone. Without one they are in memory."""
    arr = np.asarray(leaf)
    arr = arr.astype(leaf_struct(arr).dtype, copy=False)  # as JAX computes with it
    if arr.size == 0:
        raise ArgumentError(f"frozen parameter '{name}' is zero-size: leave it out of params "
                            "(close over it)")
    c = fmt.compress_leaf(arr, compress) if compress is not None else None
    if c is None:
        value = arr if store is None else _stored(store, arr)
        weight = dict(value=value, name=name, scheme="none")
        return value, weight, leaf_report(name, arr, None)
    if store is None:
        value = c.value
        error = error_of(arr, ((a, b, value[a:b]) for a, b in row_runs(arr.shape)))
        return value, dict(value=value, name=name, **c.params()), \
            leaf_report(name, arr, c, error)
    meter = ErrorMeter(arr)
    value = store.put_chunks(arr.shape, np.float32, _measured(c.value_chunks(), meter))
    payload = {k: _stored(store, v) if isinstance(v, np.ndarray) else v
               for k, v in c.params().items()}
    report = leaf_report(name, arr, c, (meter.err, meter.peak))
    return value, dict(value=value, name=name, **payload), report


def bake_leaves(named, compress: Optional[str], fmt):
    """``bake_leaf`` of each ``(name, leaf)`` through one weight store: (values, weight
    params, report rows), the arrays read-only views of the store's file. Checks first that
    the machine has the memory for it (budget.py); a tqdm bar shows on a long bake."""
    check_frozen_budget((leaf for _, leaf in named), compress,
                        getattr(fmt, "name", "mlpackage"))
    store = WeightStore()
    values, weights, rows = [], [], []
    for name, leaf in progress_items(named, "baking frozen weights"):
        value, weight, row = bake_leaf(name, leaf, compress, fmt, store)
        values.append(value)
        weights.append(weight)
        rows.append(row)
    store.seal()  # the handles become read-only views of the store's file
    values = [_viewed(store, v) for v in values]
    weights = [{k: _viewed(store, v) if k in _ARRAYS else v for k, v in w.items()}
               for w in weights]
    return values, weights, rows


def _measured(chunks, meter):
    for start, stop, rows in chunks:
        meter.add(start, stop, rows)
        yield rows


def _stored(store, arr: np.ndarray):
    """``arr`` in ``store`` (its handle), or ``arr`` itself when it is too small to be
    worth a page of its own."""
    return store.put(arr) if arr.nbytes >= MIN_BYTES else arr


def _viewed(store, v):
    return store.view(v) if isinstance(v, int) and not isinstance(v, bool) else v


@dataclass
class FrozenSplit:
    """The frozen / trainable split of one ``params`` tree."""

    treedef: Any                      # of the whole params tree
    mask: List[bool]                  # per leaf: trained?
    names: List[str]                  # per frozen leaf: 'params.Dense_0.kernel'
    values: List[np.ndarray]          # per frozen leaf: what the program computes with
    weights: List[dict]               # per frozen leaf: the params of its weight node
    report: CompressionReport

    @classmethod
    def of(cls, params, trainable, compress: Optional[str], fmt=None) -> "FrozenSplit":
        """``fmt``: the format whose scheme compresses the frozen leaves."""
        mask = resolve_mask(trainable, params)
        flat, treedef = jax.tree_util.tree_flatten_with_path(params)
        named = [(path_name("params", path), leaf)
                 for (path, leaf), m in zip(flat, mask) if not m]
        values, weights, rows = bake_leaves(named, compress, fmt)
        return cls(treedef, mask, [n for n, _ in named], values, weights,
                   CompressionReport(compress, tuple(rows)))

    def trainable_tree(self, params):
        """``params`` with every frozen leaf replaced by ``optax.MaskedNode()``."""
        from optax import MaskedNode

        leaves = jax.tree_util.tree_leaves(params)
        return jax.tree_util.tree_unflatten(
            self.treedef, [x if m else MaskedNode() for x, m in zip(leaves, self.mask)])

    def merge(self, trained, frozen: Optional[list] = None):
        """The whole tree: the leaves of ``trained`` (a trainable tree) where the mask is
        True, ``frozen`` (default: the values the program computes with) elsewhere."""
        t_it = iter(jax.tree_util.tree_leaves(trained))
        f_it = iter(self.values if frozen is None else frozen)
        return jax.tree_util.tree_unflatten(
            self.treedef, [next(t_it) if m else next(f_it) for m in self.mask])


def bake_weights(traced: Traced, n: int, weights: List[dict], rest_args) -> Traced:
    """``traced`` with its first ``n`` argument leaves (graph inputs) replaced by weight
    nodes of ``weights``' params; ``rest_args`` are the remaining arguments."""
    bad = [i for i in list(traced.dropped) + list(traced.empty_in) if i < n]
    if bad:
        raise ArgumentError("a frozen parameter is a PRNG key, a uint32 array or zero-size: "
                            "pass it in the batch or close over it")
    g = traced.graph
    mapping, made = {}, []
    for (name, v), params in zip(g.inputs[:n], weights):
        node = g.add_node("weight", [], params)
        g.nodes.pop()  # (appended) - weights go first
        if node.output.type != v.type:
            raise ArgumentError(f"internal: frozen '{params['name']}' is {node.output.type}, "
                                f"traced as {v.type}")
        made.append(node)
        mapping[v.id] = node.output
    g.nodes = made + g.nodes
    g.inputs = g.inputs[n:]
    substitute(g, mapping)
    return traced.derive(g, remove=range(n), in_types=traced.in_types[n:],
                         in_tree=jax.tree_util.tree_structure(tuple(rest_args)))
