"""``coreml_grad`` / ``coreml_value_and_grad``: ``jax.grad`` with rlxjax's own backward.

The backward pass is built by rlxjax's own transform on the RLX graph (each norm paired
with its fused backward op) instead of by JAX."""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from .api import CoreMLFunction, Stage
from .errors import ArgumentError
from .frontend import Traced
from .frontend.zerosize import EmptyIO, graph_index
from .transforms.grad import grad_graph


def _leaf_ranges(args, static_argnums):
    """For each positional argument: the range of its leaves among the dynamic leaves."""
    ranges, start = {}, 0
    for i, a in enumerate(args):
        if i in static_argnums:
            continue
        n = len(jax.tree_util.tree_leaves(a))
        ranges[i] = range(start, start + n)
        start += n
    return ranges

# a placeholder leaf for the result's treedef (not None: a pytree's own None nodes,
# eqx.partition's, are no leaves)
_LEAF = object()


class GradTransform:
    """The stage ``coreml_grad`` hands its ``CoreMLFunction`` (api.Stage): the traced
    function's backward pass, the result laid out as ``jax.grad`` / ``value_and_grad``
    lay theirs out."""

    def __init__(self, argnums, has_aux, value, static_argnums):
        self.argnums = argnums
        self.has_aux = has_aux
        self.value = value
        self.static_argnums = static_argnums
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if not nums:
            raise ArgumentError("argnums must name at least one argument")
        if set(nums) & set(static_argnums):
            raise ArgumentError(f"argnums {nums} overlap static_argnums {static_argnums}")
        self._nums = nums

    def _check_outputs(self, traced: Traced) -> int:
        """Validate the function's result; return its number of leaves."""
        tree = traced.out_tree
        if self.has_aux:
            kids = tree.children()
            if len(kids) != 2 or kids[0].num_leaves != 1:
                raise ArgumentError("has_aux=True needs the function to return a pair "
                                    "(scalar loss, aux)")
        elif tree.num_leaves != 1:
            raise ArgumentError("coreml_grad needs a function returning one scalar; return "
                                "(loss, aux) with has_aux=True for more outputs")
        if 0 in traced.empty_out:
            e = traced.empty_out[0]
            raise ArgumentError(f"gradient only defined for scalar float losses, got "
                                f"{e.dtype}{list(e.shape)}")
        loss_t = traced.graph.outputs[0][1].type
        if loss_t.rank != 0 or not loss_t.dtype.is_float:
            raise ArgumentError(f"gradient only defined for scalar float losses, got {loss_t}")
        return tree.num_leaves

    def __call__(self, traced: Traced, args) -> Traced:
        host = traced.host
        if host is not None:  # random="inputs": aux may hold host results (a new RNG state)
            host.require_device_loss("coreml_grad")
        self._check_outputs(traced)
        n_out = traced.n_device_out  # the program's result leaves (not the host's)
        for i in self._nums:
            if i >= len(args):
                raise ArgumentError(f"argnums names argument {i}, but only {len(args)} given")
        ranges = _leaf_ranges(args, set(self.static_argnums))
        wrt = [k for i in self._nums for k in ranges[i]]
        e_in, e_out = traced.empty_in, traced.empty_out
        graph_input = traced.leaf_inputs()  # dead key / uint32 and zero-size leaves: None
        for k in wrt:
            if k in traced.dropped:
                name, _, dtype = traced.dropped[k]
                is_float = False
            elif k in e_in:
                name, dtype = e_in[k].name, e_in[k].dtype
                is_float = np.dtype(dtype).kind == "f"
            else:
                name, v = traced.graph.inputs[graph_input[k]]
                dtype, is_float = v.dtype, v.dtype.is_float
            if not is_float:
                raise ArgumentError(f"gradient requires float inputs, but '{name}' is "
                                    f"{dtype}; leave that argument out of argnums")
        # Outputs kept before the gradients: the value (loss [, aux]) for value_and_grad,
        # the aux leaves for grad(has_aux=True), nothing for plain grad.
        keep = list(range(n_out)) if self.value else list(range(1, n_out))
        # Zero-size leaves are not in the graph (frontend/zerosize.py): a zero-size input's
        # gradient and a zero-size kept output stay zero-size leaves of the result.
        graph = grad_graph(traced.graph, 0, [graph_input[k] for k in wrt if k not in e_in],
                           [graph_index(k, e_out) for k in keep if k not in e_out],
                           grads_first=not self.value,
                           custom_backward=traced.custom_rules.backward)
        grad_empty = {j: EmptyIO(f"grad.{e_in[k].name}", e_in[k].shape, e_in[k].dtype)
                      for j, k in enumerate(wrt) if k in e_in}
        keep_empty = {j: e_out[k] for j, k in enumerate(keep) if k in e_out}
        first, second = (grad_empty, keep_empty) if not self.value else (keep_empty, grad_empty)
        n_first = len(wrt) if not self.value else len(keep)
        empty_out = {**first, **{n_first + j: e for j, e in second.items()}}

        # The result's pytree, built from placeholder leaves.
        blank = lambda tree: jax.tree_util.tree_unflatten(  # noqa: E731
            tree, [_LEAF] * tree.num_leaves)
        grads = tuple(blank(jax.tree_util.tree_structure(args[i])) for i in self._nums)
        grads = grads[0] if isinstance(self.argnums, int) else grads
        value = blank(traced.out_tree)
        if self.value:
            result = (value, grads)
        elif self.has_aux:
            result = (grads, value[1])
        else:
            result = grads
        out_tree = jax.tree_util.tree_structure(result)  # (None nodes stay empty nodes)
        if host is not None:  # the host's results keep their places among the value / aux
            g_none = [None] * len(wrt)
            host = host.with_outputs(host.outputs + g_none if self.value else
                                     g_none + host.outputs[1:] if self.has_aux else g_none)
        return traced.derive(graph, out_tree=out_tree, empty_out=empty_out, host=host)


def _grad_function(fun, argnums, has_aux, value, jit_options) -> CoreMLFunction:
    f = CoreMLFunction(fun, **_jit_kw(jit_options))
    f.stage = Stage(GradTransform(argnums, has_aux, value, f.static_argnums))
    return f


def coreml_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                **jit_options):
    """Like ``jax.grad``, compiled into a Core ML ML Program (see ``coreml_jit``)."""
    return _grad_function(fun, argnums, has_aux, False, jit_options)


def coreml_value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0,
                          has_aux: bool = False, **jit_options):
    """Like ``jax.value_and_grad``, compiled into a Core ML ML Program."""
    return _grad_function(fun, argnums, has_aux, True, jit_options)


def _jit_kw(opts):
    allowed = {"static_argnums", "target", "precision", "backend", "random", "flexible",
               "format"}
    unknown = set(opts) - allowed
    if unknown:
        raise ArgumentError(f"unknown option(s) {sorted(unknown)}; coreml_grad takes "
                            f"{sorted(allowed)}")
    kw = dict(static_argnums=(), target=None, precision="fp32", backend=None, random=None,
              flexible=None)
    kw.update(opts)
    return kw

