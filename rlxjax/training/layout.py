"""The typed layout of a training step's program: what each feature is and what feeds what.

The program builder (program.py) arranges a training step's graph in one fixed order:

* inputs: the parameter leaves, the optimizer-state leaves, then the batch leaves
  (``state="mlstate"``: the batch leaves only; parameters and optimizer state are states),
  then (``random="inputs"``) the random inputs the host computes from the batch's keys;
* outputs: the loss, the aux leaves (``has_aux``), then (``state="io"``) the new parameter
  and new optimizer-state leaves, in the order of the inputs they replace on the next call.

``TrainLayout.of_program`` reads the roles from that order and the features' Core ML names,
shapes and dtypes from the compiled program, so roles are never guessed from names. Its
``metadata()`` is the ``rlxjax.train`` entry of the package metadata that apps (and
``rlxjax inspect``) read.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np

from ..errors import RlxError
from ..frontend import path_name
from ..states import mlstate as _mlstate
from ..states.mlstate import CODECS, Layout, make_layout

MODES = ("io", "mlstate")
INPUT_ROLES = ("param", "opt_state", "batch", "random")  # random: computed by the host
OUTPUT_ROLES = ("loss", "aux", "new_param", "new_opt_state")
_NEW = {"param": "new_param", "opt_state": "new_opt_state"}


def leaf_struct(x) -> jax.ShapeDtypeStruct:
    """A leaf's shape and dtype as the program sees it (JAX's canonical dtype: Python
    scalars and 64-bit arrays narrowed, as ``coreml_jit`` canonicalises arguments)."""
    dtype = x.dtype if isinstance(x, jax.ShapeDtypeStruct) else np.asarray(x).dtype
    return jax.ShapeDtypeStruct(tuple(np.shape(x)), jax.dtypes.canonicalize_dtype(dtype))


def trained_leaves(params, opt_state):
    """(names, roles, structs) of the parameter and optimizer-state leaves, in program
    order, named as the tracer names the program inputs ('params.Dense_0.kernel')."""
    names, roles, structs = [], [], []
    for prefix, role, tree in (("params", "param", params), ("opt_state", "opt_state",
                                                             opt_state)):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            names.append(path_name(prefix, path))
            roles.append(role)
            structs.append(leaf_struct(leaf))
    return names, roles, structs


def state_layout(params, opt_state, codec: str = "f16x3") -> Layout:
    """``state="mlstate"``: where each parameter and optimizer-state leaf lives in the
    program's states, stored as the format's ``codec`` says (states/mlstate.py ``CODECS``). Core
    ML (fp16 pieces): a packed vector longer than a codec chunk (``CHUNK``) in one set of
    states per chunk, which the memory order reads and writes one at a time
    (coreml/mil_order.py); Core AI (``plain``, its own compiler schedules) keeps one state
    per leaf (no packed vector to concatenate and slice: ``Layout.per_leaf``)."""
    return make_layout(*trained_leaves(params, opt_state), codec=CODECS[codec],
                       chunk=_mlstate.CHUNK if codec == "f16x3" else None,
                       per_leaf=codec == "plain")


@dataclass(frozen=True)
class Feature:
    """One input or output feature of a training program."""

    name: str                 # pytree-path name in the RLX graph ('params.Dense_0.kernel')
    feature: str              # the Core ML feature name an app binds
    shape: Tuple[int, ...]    # as Core ML sees it (rank >= 1)
    dtype: str                # 'float32' | 'int32'
    role: str                 # one of INPUT_ROLES or OUTPUT_ROLES
    feeds: Optional[str] = None  # new_param / new_opt_state: the input feature it replaces

    def row(self) -> Dict[str, Any]:
        row = dict(name=self.name, feature=self.feature, shape=list(self.shape),
                   dtype=self.dtype, role=self.role)
        if self.feeds is not None:
            row["feeds"] = self.feeds
        return row


@dataclass(frozen=True)
class StateFeature:
    """``state="mlstate"``: one state of the program (a vector, see states/mlstate.py: fp16
    pieces on Core ML, the fp32 / int32 values themselves on Core AI)."""

    name: str                 # the state's name in the program
    graph_name: str           # its name in the RLX graph ('state.f32.exp')
    length: int
    role: str                 # 'f32_exp', 'f32_hi', ..., 'i32_lo'; 'f32_value', 'i32_value'
    dtype: str = "float16"
    offset: int = 0           # of its first element in the packed vector of its dtype

    def row(self) -> Dict[str, Any]:
        return dict(name=self.name, graph_name=self.graph_name, shape=[self.length],
                    dtype=self.dtype, role=self.role, offset=self.offset)


@dataclass(frozen=True)
class TrainLayout:
    mode: str                           # 'io' | 'mlstate'
    inputs: Tuple[Feature, ...]
    outputs: Tuple[Feature, ...]
    states: Tuple[StateFeature, ...] = ()
    tensors: Optional[Layout] = None    # mlstate: where each leaf lives in the states

    @classmethod
    def of_program(cls, executable, mode: str, n_params: int, n_opt_state: int,
                   has_aux: bool, tensors: Optional[Layout] = None,
                   n_random: int = 0) -> "TrainLayout":
        """The layout of ``executable`` (a format's, formats/base.py), a program arranged
        as the module doc says."""
        n_trained = n_params + n_opt_state if mode == "io" else 0
        ins, outs = executable.input_specs, executable.output_specs
        n_loss = len(outs) - n_trained
        if len(ins) < n_trained or n_loss < 1:
            raise RlxError(f"internal: a {mode} training program with {len(ins)} inputs "
                           f"and {len(outs)} outputs for {n_trained} trained leaves")
        in_roles = ["param"] * n_params + ["opt_state"] * n_opt_state if mode == "io" else []
        in_roles += ["batch"] * (len(ins) - len(in_roles) - n_random) + ["random"] * n_random
        inputs = tuple(_feature(s, r) for s, r in zip(ins, in_roles))
        outputs = [_feature(s, "loss" if i == 0 or not has_aux else "aux")
                   for i, s in enumerate(outs[:n_loss])]
        for s, fed in zip(outs[n_loss:], inputs[:n_trained]):
            outputs.append(_feature(s, _NEW[fed.role], feeds=fed.feature))
        states = ()
        if tensors is not None:
            by_graph = executable.state_graph_names
            states = tuple(StateFeature(by_graph[g], g, n, role, dt, off)
                           for g, role, n, dt, off in tensors.state_rows())
        return cls(mode, inputs, tuple(outputs), states, tensors)

    @property
    def state_names(self) -> Dict[str, str]:
        """graph name ('state.f32.exp') -> the state's name in the program."""
        return {s.graph_name: s.name for s in self.states}

    def metadata(self) -> Dict[str, Any]:
        """The ``rlxjax.train`` package metadata: what an app needs to drive the program."""
        rows = {"inputs": [f.row() for f in self.inputs],
                "outputs": [f.row() for f in self.outputs]}
        if self.mode == "io":
            return {"state": "io", **rows}
        chunk = {"state_per_leaf": True} if self.tensors.per_leaf else \
            {"state_chunk": self.tensors.chunk} if self.tensors.chunked else {}
        return {"state": "mlstate", **self.tensors.codec.metadata(), **chunk, **rows,
                "states": [s.row() for s in self.states],
                "tensors": [asdict(s) for s in self.tensors.slots]}


def _feature(spec, role: str, feeds: Optional[str] = None) -> Feature:
    return Feature(spec.name, spec.mil_name, tuple(spec.io_shape), spec.io_dtype, role, feeds)
