"""A loaded package that behaves like what saved it (``rlxjax.load``'s result).

``rlxjax.load(path)`` reads a package into a flat function (rlxjax/loaded.py: feature names
in, a dict of feature names out: the form an app sees) and wraps it here:

* a training step (the package has ``rlxjax.train``) -> ``LoadedTrainStep``: called as the
  step was, ``loaded(state, *batch) -> (TrainState, loss)`` (``(state, loss, aux)`` with
  ``has_aux``), with ``init``, ``fit``, ``params``, ``export_params`` and (mlstate)
  ``export_state``. The ``TrainState`` may come from the in-memory step (training goes on
  exactly where it left off) or from ``loaded.init(params, optimizer)``. The parameters'
  and optimizer state's pytree structure is the TrainState's, checked leaf by leaf against
  the names the package records.
* any other function -> ``LoadedFunction``: ``loaded(*args)`` takes the JAX function's
  arguments (pytrees) and returns its outputs in the pytree JAX returns
  (rlxjax/pytree_json.py).

Both keep the flat form as ``.flat`` (and forward every other attribute to it:
``input_names``, ``output_names``, ``make_state``, ``functions``...). A multifunction
package's ``function(name)`` is wrapped too; ``generate`` runs a ``prefill`` / ``decode``
pair greedily. ``rlxjax.load(path, flat=True)`` returns the flat form itself.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional

import jax
import numpy as np

from . import metadata
from .errors import ArgumentError, RlxError
from .pytree_json import from_names, rebuild
from .training.layout import trained_leaves
from .states.files import write_state_files
from .states.mlstate import CHUNK, CODECS, host_pack, host_unpack, make_layout
from .training.state import TrainState

#: a package's rlxjax.train "encoding" -> the codec that wrote its states (states/mlstate.py)
_CODEC_BY_NAME = {c.name: key for key, c in CODECS.items()}


def structured(flat, owner=None):
    """The wrapper of the flat loaded function ``flat`` (module doc)."""
    if metadata.TRAIN in flat._meta:
        return LoadedTrainStep(flat)
    return LoadedFunction(flat, owner)


class _Wrapper:
    def __init__(self, flat, owner=None):
        self.flat = flat
        self._owner = owner   # the LoadedTrainStep whose device state this function shares

    def __getattr__(self, name):  # the flat form's attributes (input_names, make_state...)
        if name == "flat":
            raise AttributeError(name)
        return getattr(self.flat, name)

    def function(self, name: str):
        """Function ``name`` of this multifunction package, wrapped as this one is; in an
        mlstate package it runs on the device state of this object's latest step."""
        owner = self if isinstance(self, LoadedTrainStep) else self._owner
        return structured(self.flat.function(name), owner)

    def _shared_state(self):
        """The device state of the owning training step, for a function without state=."""
        owner = self if isinstance(self, LoadedTrainStep) else self._owner
        dev = getattr(owner, "_device", None)
        return None if dev is None else dev.handle

    def generate(self, prompt, steps: int, *, state=None,
                 select: Callable = None) -> List[int]:
        """Greedy generation over the package's ``prefill`` and ``decode`` functions:
        ``prefill(prompt)`` then ``steps`` calls of ``decode(token)``, each token
        ``select(logits)`` (default: argmax over the last axis, of the last position);
        returns the tokens. ``state``: the package's states (default: the owning training
        step's device state, else ``make_state()``: zero states, an empty cache)."""
        names = self.flat.functions
        if not {"prefill", "decode"} <= set(names):
            raise ArgumentError(f"generate needs functions 'prefill' and 'decode'; "
                                f"{self.flat.path} has {list(names)}")
        pre, dec = self.flat.function("prefill"), self.flat.function("decode")
        if state is None:
            state = self._shared_state()
        if state is None:
            state = self.flat.make_state()
        select = select or _argmax_last
        tok_shape = dec.input_specs[0].shape if dec.input_specs else (1, 1)
        logits = _only(pre(prompt, state=state))
        tokens = []
        for _ in range(steps):
            t = np.asarray(select(logits), np.int32)
            tokens.append(int(t.reshape(-1)[0]))
            logits = _only(dec(t.reshape(tok_shape), state=state))
        return tokens


def _argmax_last(logits):
    logits = np.asarray(logits)
    while logits.ndim > 2:  # [batch, positions, vocab]: the last position
        logits = logits[:, -1]
    return np.argmax(logits, -1)


def _only(outs: Dict[str, np.ndarray]):
    if len(outs) != 1:
        raise ArgumentError(f"generate needs one output (the logits); got {list(outs)}")
    return next(iter(outs.values()))


class LoadedFunction(_Wrapper):
    """A loaded function: ``f(*args)`` as JAX's ``f``, outputs in JAX's pytree."""

    def __call__(self, *args, state=None, **kwargs):
        if kwargs:  # by feature name: the flat form
            raise ArgumentError("a loaded function takes its JAX arguments positionally "
                                f"(pytrees); for inputs by feature name "
                                f"{list(self.flat.input_names)} use .flat(**inputs)")
        leaves = jax.tree_util.tree_leaves(args)
        if self.flat.state_names and state is None:
            state = self._shared_state()
        outs = self.flat(*leaves) if state is None else self.flat(*leaves, state=state)
        return self.tree(outs)

    def tree(self, outs: Dict[str, np.ndarray]):
        """The flat call's outputs ``outs`` (feature name -> array) in the pytree the
        function returned when it was compiled."""
        values = [outs[n] for n in self.flat.output_names]
        desc = metadata.read(self.flat._meta, metadata.TREE)
        if desc is not None:
            return rebuild(desc, values)
        jax_names = _jax_output_names(self.flat)
        if jax_names is None:   # a package rlxjax did not write: its features by name
            return dict(outs)
        return from_names(jax_names, values)

    def __repr__(self):
        return f"LoadedFunction({self.flat!r})"


def _jax_output_names(flat) -> Optional[List[str]]:
    """The JAX-side (pytree path) names of the outputs, in order (None without metadata)."""
    if flat.output_specs is None:
        return None
    return [getattr(s, "name") for _, s in flat._outputs]


class _LoadedDevice:
    """The device state of a loaded mlstate step (what ``TrainState.device`` holds)."""

    def __init__(self, step: "LoadedTrainStep", handle, layout, trees):
        self.step, self.handle, self.layout, self.trees = step, handle, layout, trees
        self.version = 0

    def pieces(self) -> Dict[str, np.ndarray]:
        names = self.step._state_names
        return {g: np.asarray(self.handle.read_state(names[g]), dt)
                for g, _, _, dt in self.layout.state_types()}

    def read_trees(self):
        leaves = host_unpack(self.layout, self.pieces())
        n = self.trees[0].num_leaves
        return (jax.tree_util.tree_unflatten(self.trees[0], leaves[:n]),
                jax.tree_util.tree_unflatten(self.trees[1], leaves[n:]))


class LoadedTrainStep(_Wrapper):
    """A loaded training step: ``loaded(state, *batch) -> (state, loss)`` as the step
    (``(state, loss, aux)`` with ``has_aux``: aux in the structure its output names spell).
    Called without a TrainState first, it is the flat form (``.flat``): inputs by feature
    name or in order, a dict of outputs by feature name.

    ``train`` is the package's ``rlxjax.train`` metadata: every feature with its role
    (``param``, ``opt_state``, ``batch``, ``random``; ``loss``, ``aux``, ``new_param``,
    ``new_opt_state``, each ``new_*`` naming the input it ``feeds``), and for
    ``state="mlstate"`` the states and where each leaf lives in them."""

    def __init__(self, flat):
        super().__init__(flat)
        self.train = metadata.read(flat._meta, metadata.TRAIN)
        self.state_mode = self.train["state"]
        self.has_aux = any(r["role"] == "aux" for r in self.train["outputs"])
        self._state_names = {r["graph_name"]: r["name"] for r in self.train.get("states", ())}
        self._device: Optional[_LoadedDevice] = None

    # -- the step's host API -------------------------------------------------------------
    def init(self, params, optimizer) -> TrainState:
        """The initial TrainState: ``params`` and ``optimizer.init(params)`` (the optax
        optimizer the step was compiled with: the package holds its update, not its init)."""
        params = jax.tree_util.tree_map(np.asarray, params)
        return TrainState(params, jax.tree_util.tree_map(np.asarray, optimizer.init(params)), 0)

    def __call__(self, *args, **kwargs):
        if not args or not isinstance(args[0], TrainState):
            if not kwargs and not args:
                raise ArgumentError("call a loaded training step as loaded(state, *batch) "
                                    "with a TrainState (loaded.init(params, optimizer))")
            return self.flat(*args, **kwargs)   # the flat form (feature names / leaves)
        state, batch = args[0], args[1:]
        if isinstance(metadata.read(self.flat._meta, metadata.RANDOM), list):
            raise ArgumentError(f"{self.flat.path} draws its randomness on the host "
                                "(random='inputs'): call it through .flat with the random "
                                "inputs it lists (rlxjax.random metadata), or compile the "
                                "step with random='device'")
        if kwargs:
            raise ArgumentError("pass the batch positionally, as to the step")
        batch_leaves = jax.tree_util.tree_leaves(batch)
        if self.state_mode == "io":
            return self._io_step(state, batch_leaves)
        return self._mlstate_step(state, batch_leaves)

    def _check_names(self, state: TrainState, roles) -> List[np.ndarray]:
        """The state's leaves, checked against the package's names for ``roles``."""
        names, _, _ = trained_leaves(state.params, state.opt_state)
        want = [r["name"] for r in self.train["inputs"] if r["role"] in roles]
        if self.state_mode == "mlstate":
            want = [s["name"] for s in self.train["tensors"]]
        if names != want:
            bad = next((f"'{a}' where the package has '{b}'" for a, b in zip(names, want)
                        if a != b), f"{len(names)} leaves where the package has {len(want)}")
            raise ArgumentError(f"this TrainState does not fit {self.flat.path}: {bad}; "
                                "pass the TrainState of the step that saved it (or "
                                "loaded.init(params, optimizer) with the same model and "
                                "optimizer)")
        return state.leaves()

    def _split(self, outs):
        rows = self.train["outputs"]
        by_role = {role: [outs[r["feature"]] for r in rows if r["role"] == role]
                   for role in ("loss", "aux", "new_param", "new_opt_state")}
        loss = by_role["loss"][0]
        aux_names = [_jax_name(self.flat, r["feature"]) for r in rows if r["role"] == "aux"]
        aux = from_names(aux_names, by_role["aux"], prefix="out.1") if self.has_aux else None
        return loss, aux, by_role["new_param"] + by_role["new_opt_state"]

    def _result(self, new_state, loss, aux):
        return (new_state, loss) if not self.has_aux else (new_state, loss, aux)

    def _io_step(self, state: TrainState, batch_leaves):
        leaves = self._check_names(state, ("param", "opt_state"))
        outs = self.flat(*leaves, *batch_leaves)
        loss, aux, new = self._split(outs)
        tree = jax.tree_util.tree_structure((state.params, state.opt_state))
        params, opt_state = jax.tree_util.tree_unflatten(tree, new)
        return self._result(TrainState(params, opt_state, state.step + 1), loss, aux)

    def _layout(self, state: TrainState):
        codec = _CODEC_BY_NAME.get(self.train.get("encoding"))
        if codec is None:
            raise RlxError(f"{self.flat.path}: unknown state encoding "
                           f"{self.train.get('encoding')!r}")
        per_leaf = bool(self.train.get("state_per_leaf"))   # Core AI: one state per leaf
        chunk = None if per_leaf else (
            self.train.get("state_chunk") or (CHUNK if codec == "f16x3" else None))
        return make_layout(*trained_leaves(state.params, state.opt_state),
                           codec=CODECS[codec], chunk=chunk, per_leaf=per_leaf)

    def _device_for(self, state: TrainState) -> _LoadedDevice:
        """The device state to step ``state`` with: this step's own when ``state`` is its
        latest, else fresh states written from the host values."""
        if state.device is self._device and state.live:
            return self._device
        leaves = self._check_names(state, ())
        layout = self._layout(state)
        handle = self.flat.make_state()
        for g, arr in host_pack(layout, leaves).items():
            handle.write_state(self._state_names[g], arr)
        trees = (jax.tree_util.tree_structure(state.params),
                 jax.tree_util.tree_structure(state.opt_state))
        self._device = _LoadedDevice(self, handle, layout, trees)
        return self._device

    def _mlstate_step(self, state: TrainState, batch_leaves):
        dev = self._device_for(state)
        outs = self.flat(*batch_leaves, state=dev.handle)
        dev.version += 1
        loss, aux, _ = self._split(outs)
        return self._result(TrainState(None, None, state.step + 1, device=dev,
                                       version=dev.version), loss, aux)

    # -- as TrainStep ----------------------------------------------------------------------
    def fit(self, state: TrainState, batches: Iterable, steps: int, progress: bool = True):
        """Run ``steps`` steps over ``batches`` (cycled); returns (state, loss history),
        as ``TrainStep.fit``."""
        from .training.step import TrainStep

        return TrainStep.fit(self, state, batches, steps, progress)

    def params(self, state: TrainState):
        """The parameters of ``state`` as a JAX pytree."""
        return jax.tree_util.tree_map(jax.numpy.asarray, state.params)

    def export_params(self, state: TrainState, path) -> str:
        """The parameters to the safetensors file ``path`` (as ``TrainStep.export_params``)."""
        from .training.params_io import save_params

        return save_params(path, self.params(state), {"step": str(state.step)})

    def export_state(self, state: TrainState, folder) -> str:
        """mlstate: the state files an app loads before its first step (as
        ``TrainStep.export_state``)."""
        if self.state_mode != "mlstate":
            raise RlxError("export_state is for a state='mlstate' step; this one keeps its "
                           "parameters in its inputs and outputs")
        pieces = host_pack(self._layout(state), self._check_names(state, ()))
        return write_state_files(folder, state.step,
                                 {self._state_names[g]: a for g, a in pieces.items()})

    def __repr__(self):
        return (f"LoadedTrainStep({self.flat.path!r}, state={self.state_mode!r}, "
                f"batch={[r['feature'] for r in self.train['inputs'] if r['role'] == 'batch']})")


def _jax_name(flat, feature: str) -> str:
    for n, s in getattr(flat, "_outputs", ()):
        if n == feature:
            return s.name
    return feature
