"""``coreml_grad`` / ``coreml_value_and_grad``: ``jax.grad`` semantics, with the backward
pass built by rlxjax's own transform on the RLX graph (each norm paired with its fused
backward op) instead of by JAX."""
from __future__ import annotations

from typing import Callable, Sequence

import jax

from .api import CoreMLFunction
from .errors import ArgumentError
from .frontend import Traced
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


class GradFunction(CoreMLFunction):
    def __init__(self, fun, argnums, has_aux, value, **jit_options):
        super().__init__(fun, **jit_options)
        self.argnums = argnums
        self.has_aux = has_aux
        self.value = value
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if not nums:
            raise ArgumentError("argnums must name at least one argument")
        if set(nums) & set(self.static_argnums):
            raise ArgumentError(f"argnums {nums} overlap static_argnums {self.static_argnums}")
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
        loss_t = traced.graph.outputs[0][1].type
        if loss_t.rank != 0 or not loss_t.dtype.is_float:
            raise ArgumentError(f"gradient only defined for scalar float losses, got {loss_t}")
        return tree.num_leaves

    def _transform(self, traced: Traced, args) -> Traced:
        if traced.host is not None:
            traced.host.require_device_results("coreml_grad")
        n_out = self._check_outputs(traced)
        for i in self._nums:
            if i >= len(args):
                raise ArgumentError(f"argnums names argument {i}, but only {len(args)} given")
        ranges = _leaf_ranges(args, set(self.static_argnums))
        graph_input = traced.leaf_inputs()  # dead key / uint32 leaves are no inputs
        for k in (k for i in self._nums for k in ranges[i] if graph_input[k] is None):
            name, _, dtype = traced.dropped[k]
            raise ArgumentError(f"gradient requires float inputs, but '{name}' is {dtype}; "
                                "leave that argument out of argnums")
        wrt = [graph_input[k] for i in self._nums for k in ranges[i]]
        for k in wrt:
            name, v = traced.graph.inputs[k]
            if not v.dtype.is_float:
                raise ArgumentError(f"gradient requires float inputs, but '{name}' is "
                                    f"{v.dtype}; leave that argument out of argnums")
        # Outputs kept before the gradients: the value (loss [, aux]) for value_and_grad,
        # the aux leaves for grad(has_aux=True), nothing for plain grad.
        keep = list(range(n_out)) if self.value else list(range(1, n_out))
        graph = grad_graph(traced.graph, 0, wrt, keep, grads_first=not self.value,
                           custom_backward=traced.custom_rules.backward)

        # The result's pytree, built from placeholders and flattened with None as a leaf.
        blank = lambda tree: jax.tree_util.tree_unflatten(  # noqa: E731
            tree, [None] * tree.num_leaves)
        grads = tuple(blank(jax.tree_util.tree_structure(args[i])) for i in self._nums)
        grads = grads[0] if isinstance(self.argnums, int) else grads
        value = blank(traced.out_tree)
        if self.value:
            result = (value, grads)
        elif self.has_aux:
            result = (grads, value[1])
        else:
            result = grads
        out_tree = jax.tree_util.tree_structure(result, is_leaf=lambda x: x is None)
        return Traced(graph, traced.in_tree, out_tree, traced.in_types, traced.custom_rules,
                      traced.dropped, traced.host, traced.u32_leaves)


def coreml_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                **jit_options):
    """Like ``jax.grad``, compiled into a Core ML ML Program (see ``coreml_jit``)."""
    return GradFunction(fun, argnums, has_aux, value=False, **_jit_kw(jit_options))


def coreml_value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0,
                          has_aux: bool = False, **jit_options):
    """Like ``jax.value_and_grad``, compiled into a Core ML ML Program."""
    return GradFunction(fun, argnums, has_aux, value=True, **_jit_kw(jit_options))


def _jit_kw(opts):
    allowed = {"static_argnums", "target", "precision", "backend", "random"}
    unknown = set(opts) - allowed
    if unknown:
        raise ArgumentError(f"unknown option(s) {sorted(unknown)}; coreml_grad takes "
                            f"{sorted(allowed)}")
    kw = dict(static_argnums=(), target="iOS17", precision="fp32", backend=None, random=None)
    kw.update(opts)
    return kw

