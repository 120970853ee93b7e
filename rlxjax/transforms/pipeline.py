"""The pass pipeline on the RLX graph: which passes run, in which order, on which graphs.

The compile stages (rlxjax/stages.py) run, for every function compiled::

    trace ─► BEFORE_AD ─► the function's own transform ─► AFTER_AD ─► BEFORE_LOWERING ─► format
                          (none for coreml_jit; the grad
                           transform for coreml_grad; grad
                           + optimizer update for train steps,
                           training/pipeline.py)

Each pass rewrites one graph in place. A pass marked ``regions=True`` runs on the graph and
then on every region nested in it (cond branches, loop bodies, custom rules' bodies, at any
depth, outer before inner), each region on its own: regions are closed graphs, so a pass
needs nothing from around them.

- ``recognize_norms`` runs before any transform, so that the grad transform pairs each
  recognised norm with its fused backward op; in regions too, so a norm in a scanned layer
  keeps its fused backward.
- ``recognize_activations`` (after the norms, which take precedence) fuses softmax,
  log_softmax, gelu and silu (transforms/recognize_activations.py) for the same reason;
  ``recognize_attention`` then fuses ``softmax(q·kᵀ·scale + mask)·v`` (it needs the fused
  softmax; with a bool mask only where the format says it lowers one,
  ``Format.attention_bool_masks``).
- ``inline_remat`` replaces each ``remat`` node (``jax.checkpoint``) by its body once the
  grad transform has recomputed, in the backward pass, what the policy did not save.
- ``drop_remat_barriers`` (run by ``stages.to_format`` for a format without a lowering of
  ``remat_barrier``, formats/base.py ``Format.lowers_remat_barrier``): the barriers'
  readers read their inputs.
- ``inline_custom_calls`` replaces each ``custom_vjp`` node of the top-level graph by its
  primal body once the grad transform has used the custom rule (those inside regions are
  lowered as they are: coreml/rules/control.py).
- ``fold_constants`` (stage ``BEFORE_LOWERING``, run by ``stages.to_format``): constant
  folding on the RLX graph with the RLX op's own semantics (transforms/fold/), in the
  program's precision (an fp16 program folds in fp16), so it runs once the precision is
  known. It walks regions itself: constant operands of a region op flow into the region.
- ``fold_scalar_muls`` (after ``fold_constants``, in fp32 programs): ``(x * a) * 2**k`` ->
  ``x * (a * 2**k)`` for scalar constants within a bound (transforms/scalar_muls.py; the
  range where it could differ is in docs/numerics.md).
- ``simplify`` makes the program smaller without changing a bit of any output
  (transforms/simplify.py, transforms/cse.py).

MIL-level passes (CSE of the emitted protobuf, the memory order, ...) run after the
lowering, in the Core ML format's compile (coreml/format.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from ..ir import Graph
from .cse import cse
from .fold import fold_constants
from .recognize_activations import recognize_activations
from .recognize_attention import recognize_attention
from .recognize_norms import recognize_norms
from .regions import all_regions, drop_remat_barriers, inline_custom_calls, inline_remat
from .scalar_muls import fold_scalar_muls
from .rewrite import dce
from .simplify import simplify


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[..., Any]      # rewrites the graph in place; returns what it did
    regions: bool = True         # also run on every region nested in the graph
    options: Tuple[str, ...] = ()  # keyword options of run_passes the pass takes


#: Every pass by name (the stages below pick from these; tests and tools may run any).
PASSES: Dict[str, Pass] = {p.name: p for p in (
    Pass("recognize_norms", recognize_norms),
    Pass("recognize_activations", recognize_activations),
    Pass("recognize_attention", recognize_attention, options=("attention_bool_masks",)),
    Pass("inline_custom_calls", inline_custom_calls, regions=False),
    Pass("inline_remat", inline_remat),
    Pass("drop_remat_barriers", drop_remat_barriers),
    Pass("simplify", simplify),
    Pass("cse", cse),
    Pass("dce", dce),
    Pass("fold_constants", fold_constants, regions=False, options=("precision",)),
    Pass("fold_scalar_muls", fold_scalar_muls, options=("precision",)),
)}

#: Before the function's transform (see the module docstring).
BEFORE_AD = ("recognize_norms", "recognize_activations", "recognize_attention")

#: After the function's transform, before the lowering.
AFTER_AD = (
    "inline_remat",
    "inline_custom_calls",
    "simplify",
)

#: When the program's precision is known, just before the Core ML lowering.
BEFORE_LOWERING = ("fold_constants", "fold_scalar_muls")


def run_passes(graph: Graph, names: Sequence[str], **options) -> Dict[str, List[Any]]:
    """Run the named passes in order on ``graph`` (and its regions, where the pass says
    so), each given the ``options`` it takes; returns ``{name: [result per graph, the
    top-level graph first]}``."""
    results: Dict[str, List[Any]] = {}
    for name in names:
        p = PASSES[name]
        kw = {k: options[k] for k in p.options if k in options}
        graphs = [graph, *all_regions(graph)] if p.regions else [graph]
        results[name] = [p.run(g, **kw) for g in graphs]
    return results
