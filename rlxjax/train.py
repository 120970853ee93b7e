"""``coreml_train_step``: forward, backward and an optax update in one ML Program.

The program's inputs are the parameters, the optimizer state and a batch; its outputs are
the loss (and aux), the new parameters and the new optimizer state (``state="io"``): an
app feeds the new values back in on the next call. The backward pass is rlxjax's own
(fused norm backward ops); the optax update is traced like any JAX code and inlined into
the same graph, reading the gradients the backward pass produced.
"""
from __future__ import annotations

import inspect

import json
import os
import sys
import tempfile
import time
from typing import Any, Callable, Iterable, List, Optional

import jax
import numpy as np

from .api import CoreMLFunction
from .coreml.package import remove_stale_staging, staging_prefix
from .coreml.targets import get_target, require
from .errors import ArgumentError, RlxError
from .frontend import Traced, arg_names, path_name
from .frontend.interpreter import Lowering
from .ir import verify
from .transforms.grad import backward
from .transforms.rewrite import dce

STATES = ("io", "mlstate")


class TrainState:
    """What one training step reads and returns: parameters and optimizer state (pytrees
    of numpy arrays) and the number of steps taken.

    With ``state="mlstate"`` the values live in the program's Core ML state (``device``),
    updated in place by each step; ``params`` / ``opt_state`` read them back (exactly) on
    first access. Only the TrainState the latest step returned is current."""

    def __init__(self, params, opt_state, step: int = 0, *, device=None, version: int = 0):
        self._params, self._opt_state = params, opt_state
        self._on_host = device is None or params is not None
        self.step = int(step)
        self.device = device       # mlstate.DeviceState or None
        self._version = version    # device.version this state corresponds to

    @property
    def live(self) -> bool:
        """True when ``device`` holds exactly this state (not yet stepped past)."""
        return self.device is not None and self.device.version == self._version

    def _pull(self) -> None:
        if self._on_host:
            return
        from .mlstate import consumed_error

        if not self.live:
            raise consumed_error()
        leaves = self.device.read_leaves()
        n = self.device.layout.n_params
        ptree, stree = self.device.trees
        self._params = jax.tree_util.tree_unflatten(ptree, leaves[:n])
        self._opt_state = jax.tree_util.tree_unflatten(stree, leaves[n:])
        self._on_host = True

    @property
    def params(self):
        self._pull()
        return self._params

    @property
    def opt_state(self):
        self._pull()
        return self._opt_state

    def __repr__(self):
        where = "device" if not self._on_host else "host"
        return f"TrainState(step={self.step}, on {where})"

    def save(self, path) -> str:
        """Write a checkpoint atomically (a failure leaves the previous file or none)."""
        path = os.fspath(path)
        leaves = jax.tree_util.tree_leaves((self.params, self.opt_state))
        arrays = {f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)}
        _atomic_write(path, lambda f: np.savez(f, step=np.int64(self.step), **arrays), "ckpt-")
        return os.path.abspath(path)

    @classmethod
    def load(cls, path, like: "TrainState") -> "TrainState":
        """Read a checkpoint written by ``save`` into the structure of ``like``."""
        with np.load(os.fspath(path)) as z:
            tree = jax.tree_util.tree_structure((like.params, like.opt_state))
            want = jax.tree_util.tree_leaves((like.params, like.opt_state))
            n = len([k for k in z.files if k.startswith("leaf_")])
            if n != len(want):
                raise ArgumentError(f"checkpoint {path} holds {n} arrays, the state "
                                    f"{len(want)}: it was written for another model or optimizer")
            leaves = [z[f"leaf_{i}"] for i in range(n)]
            for i, (a, b) in enumerate(zip(leaves, want)):
                if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
                    raise ArgumentError(f"checkpoint array {i} is {a.dtype}{list(a.shape)}, the "
                                        f"state wants {np.asarray(b).dtype}{list(np.shape(b))}")
            params, opt_state = jax.tree_util.tree_unflatten(tree, leaves)
            return cls(params, opt_state, int(z["step"]))


def _numpy_tree(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _atomic_write(path: str, write, kind: str = "file-") -> None:
    """Write ``path`` through ``write(file)`` atomically: a staging file in the same folder,
    fsynced, then renamed over ``path`` (a failure leaves the previous file or none)."""
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale_staging(folder)
    fd, tmp = tempfile.mkstemp(prefix=staging_prefix(kind), dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _atomic_write_bytes(path: str, data: bytes) -> None:
    _atomic_write(path, lambda f: f.write(data))


def _struct(x) -> jax.ShapeDtypeStruct:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)


class TrainStep(CoreMLFunction):
    """What ``coreml_train_step`` returns."""

    def __init__(self, loss: Callable, optimizer, *, state: str, has_aux: bool, **jit_options):
        if state not in STATES:
            raise ArgumentError(f"state={state!r}: choose 'io' (params and optimizer state as "
                                "inputs and outputs) or 'mlstate' (Core ML states, iOS18)")

        def step_fn(params, opt_state, *batch):
            return loss(params, *batch)

        step_fn.__name__ = getattr(loss, "__name__", "train_step")
        super().__init__(step_fn, **jit_options)
        self.loss = loss
        self.optimizer = optimizer
        self.has_aux = has_aux
        self.state_mode = state
        self._last: Optional[Any] = None  # the most recently used Compiled program

    def _names(self, n_args):
        # Batch inputs are named after the loss's own parameters (loss(params, x, y) ->
        # features 'x', 'y'), which is what an app binds.
        return ["params", "opt_state"] + arg_names(self.loss, n_args - 1)[1:]

    # -- building the program --------------------------------------------------------
    def _transform(self, traced: Traced, args) -> Traced:
        params, opt_state = args[0], args[1]
        g = traced.graph
        n_p = len(jax.tree_util.tree_leaves(params))
        n_s = len(jax.tree_util.tree_leaves(opt_state))
        p_vals = [v for _, v in g.inputs[:n_p]]
        s_vals = [v for _, v in g.inputs[n_p:n_p + n_s]]
        n_out = traced.out_tree.num_leaves
        if (self.has_aux and len(traced.out_tree.children()) != 2) or \
                (not self.has_aux and n_out != 1):
            raise ArgumentError("the loss must return a scalar" +
                                (" and aux as a pair (loss, aux)" if self.has_aux else
                                 "; pass has_aux=True to return (loss, aux)"))
        loss_v = g.outputs[0][1]
        if loss_v.type.rank != 0 or not loss_v.dtype.is_float:
            raise ArgumentError(f"the loss must be a float scalar, got {loss_v.type}")
        for name, v in g.inputs[:n_p]:
            if not v.dtype.is_float:
                raise ArgumentError(f"parameter '{name}' is {v.dtype}: only float parameters "
                                    "can be trained")
        grads = backward(g, loss_v, p_vals, traced.custom_rules.backward)
        new_p, new_s = self._inline_update(g, grads, s_vals, p_vals, params, opt_state)
        if self.state_mode == "mlstate":
            return self._to_states(traced, args, p_vals + s_vals, new_p + new_s)

        out_names = [(n, v) for n, v in g.outputs]
        p_paths = jax.tree_util.tree_flatten_with_path(params)[0]
        s_paths = jax.tree_util.tree_flatten_with_path(opt_state)[0]
        g.outputs = out_names + \
            [(path_name("new.params", p), v) for (p, _), v in zip(p_paths, new_p)] + \
            [(path_name("new.opt_state", p), v) for (p, _), v in zip(s_paths, new_s)]
        dce(g)
        verify(g)
        blank = lambda t: jax.tree_util.tree_unflatten(  # noqa: E731
            t, [None] * t.num_leaves)
        result = (blank(traced.out_tree),
                  blank(jax.tree_util.tree_structure(params)),
                  blank(jax.tree_util.tree_structure(opt_state)))
        out_tree = jax.tree_util.tree_structure(result, is_leaf=lambda x: x is None)
        return Traced(g, traced.in_tree, out_tree, traced.in_types)

    def _to_states(self, traced: Traced, args, in_vals, out_vals) -> Traced:
        """mlstate: params and optimizer state become Core ML states (rlxjax/mlstate.py)."""
        from .mlstate import rewrite_to_states

        g, n = traced.graph, len(in_vals)
        names = [name for name, _ in g.inputs[:n]]
        n_p = len(jax.tree_util.tree_leaves(args[0]))
        roles = ["param"] * n_p + ["opt_state"] * (n - n_p)
        self._pending = rewrite_to_states(g, names, roles, in_vals, out_vals, len(g.outputs))
        dce(g)
        verify(g)
        batch = tuple(args[2:])
        return Traced(g, jax.tree_util.tree_structure(batch), traced.out_tree,
                      traced.in_types[n:])

    def lower(self, *args, **kwargs):
        lowered = super().lower(*args, **kwargs)
        if self.state_mode == "mlstate":
            lowered.mlstate_layout, lowered.states = self._pending
        return lowered

    def _inline_update(self, g, grads, s_vals, p_vals, params, opt_state):
        import optax

        def update(grads, opt_state, params):
            updates, new_state = self.optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_state

        struct = lambda t: jax.tree_util.tree_map(_struct, t)  # noqa: E731
        closed = jax.make_jaxpr(update)(struct(params), struct(opt_state), struct(params))
        outs = Lowering(g).eval_jaxpr(closed.jaxpr, closed.consts, grads + s_vals + p_vals)
        n_p = len(p_vals)
        return outs[:n_p], outs[n_p:]

    # -- host API ----------------------------------------------------------------------
    def init(self, params, *example_batch) -> TrainState:
        """The initial TrainState. Passing an example batch also compiles the program for
        its shapes (so ``save`` works before the first step) and, in mlstate mode, writes the
        values into a fresh device state (otherwise the first step does that)."""
        params = _numpy_tree(params)
        state = TrainState(params, _numpy_tree(self.optimizer.init(params)), 0)
        if self.state_mode == "mlstate" and example_batch:
            compiled = self._compiled_mlstate(state, example_batch)
            state = TrainState(params, state.opt_state, 0, device=self._device(state, compiled))
        elif example_batch:
            self._compiled_io(state, example_batch)
        return state

    def __call__(self, state: TrainState, *batch):
        if not isinstance(state, TrainState):
            raise ArgumentError("call a training step as step(state, *batch) with the "
                                "TrainState from step.init(params)")
        if self.state_mode == "mlstate":
            return self._call_mlstate(state, batch)
        compiled = self._compiled_io(state, batch)
        value, params, opt_state = compiled(state.params, state.opt_state, *batch)
        new_state = TrainState(params, opt_state, state.step + 1)
        return (new_state, value) if not self.has_aux else (new_state, value[0], value[1])

    def _compiled_io(self, state: TrainState, batch):
        key = self._key((state.params, state.opt_state) + tuple(batch))
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self.lower(state.params, state.opt_state,
                                                     *batch).compile()
            _annotate_roles(compiled, self.has_aux)
        self._last = compiled
        return compiled

    # -- mlstate ---------------------------------------------------------------------------
    def _compiled_mlstate(self, state: TrainState, batch):
        from .mlstate import train_metadata

        dev = state.device
        structs = dev.structs if dev is not None else \
            jax.tree_util.tree_map(_struct, (state.params, state.opt_state))
        leaves, tree = jax.tree_util.tree_flatten(structs)
        key = ("mlstate", tree, tuple((x.shape, x.dtype.name) for x in leaves), self._key(batch))
        compiled = self._cache.get(key)
        if compiled is None:
            lowered = self.lower(*structs, *batch)
            compiled = self._cache[key] = lowered.compile()
            compiled.mlstate_layout, compiled.mlstate_structs = lowered.mlstate_layout, structs
            compiled.spec.description.metadata.userDefined["rlxjax.train"] = json.dumps(
                train_metadata(compiled, lowered.mlstate_layout, self.has_aux))
        self._last = compiled
        return compiled

    def _device(self, state: TrainState, compiled):
        """The device state to step ``state`` with on ``compiled``: its own when current,
        else a fresh one written from the host values (raises if ``state`` was consumed)."""
        from .mlstate import DeviceState

        if state.live and state.device.compiled is compiled:
            return state.device
        leaves = jax.tree_util.tree_leaves((state.params, state.opt_state))
        names = {f.shortDescription: f.name for f in compiled.spec.description.state}
        dev = DeviceState(compiled, compiled.mlstate_layout, names)
        dev.structs = compiled.mlstate_structs
        dev.trees = tuple(jax.tree_util.tree_structure(t) for t in compiled.mlstate_structs)
        dev.write_leaves(leaves)
        return dev

    def _call_mlstate(self, state: TrainState, batch):
        compiled = self._compiled_mlstate(state, batch)
        dev = self._device(state, compiled)
        value = compiled(*batch, state=dev.handle)
        dev.version += 1
        new_state = TrainState(None, None, state.step + 1, device=dev, version=dev.version)
        return (new_state, value) if not self.has_aux else (new_state, value[0], value[1])

    def export_state(self, state: TrainState, folder) -> str:
        """mlstate: write what an app loads into its ``MLState`` before the first step - one
        raw little-endian fp16 file per state (``<state name>.f16``) and ``state.json``
        (names, shapes, step) - into ``folder``. Each file is written atomically."""
        from .mlstate import host_pack

        if self.state_mode != "mlstate" or self._last is None:
            raise RlxError("export_state needs an mlstate step that has been compiled (call "
                           "it once, or init(params, *example_batch))")
        compiled = self._last
        pieces = host_pack(compiled.mlstate_layout,
                           jax.tree_util.tree_leaves((state.params, state.opt_state)))
        names = {f.shortDescription: f.name for f in compiled.spec.description.state}
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        rows = []
        for gname, arr in pieces.items():
            _atomic_write_bytes(os.path.join(folder, names[gname] + ".f16"),
                               arr.astype("<f2").tobytes())
            rows.append({"name": names[gname], "shape": list(arr.shape), "dtype": "float16"})
        _atomic_write_bytes(os.path.join(folder, "state.json"),
                           json.dumps({"step": state.step, "states": rows}).encode())
        return os.path.abspath(folder)

    def params(self, state: TrainState):
        """The trained parameters as a JAX pytree."""
        return jax.tree_util.tree_map(jax.numpy.asarray, state.params)

    def fit(self, state: TrainState, batches: Iterable, steps: int, progress: bool = True):
        """Run ``steps`` steps over ``batches`` (an iterable of argument tuples, cycled);
        returns (state, loss history)."""
        history: List[float] = []
        batches = list(batches)
        if not batches:
            raise ArgumentError("fit needs at least one batch")
        t0 = time.perf_counter()
        for i in range(steps):
            b = batches[i % len(batches)]
            b = b if isinstance(b, tuple) else (b,)
            out = self(state, *b)
            state, loss = out[0], float(out[1])
            history.append(loss)
            if progress:
                _progress(i + 1, steps, loss, time.perf_counter() - t0)
        if progress:
            sys.stderr.write("\n")
        return state, history

    def save(self, path) -> str:
        """Save the training program last run (call the step once first)."""
        if self._last is None:
            raise RlxError("nothing compiled yet: call the step once (or step.lower(...)) "
                           "so that the batch shapes are known, then save")
        return self._last.save(path)


def _progress(i, n, loss, elapsed):
    width = 30
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} loss {loss:.5g} "
                     f"{elapsed:.1f}s")
    sys.stderr.flush()


def _role(name: str) -> str:
    for prefix, role in (("new.params", "new_param"), ("new.opt_state", "new_opt_state"),
                         ("params", "param"), ("opt_state", "opt_state"), ("out", "loss")):
        if name == prefix or name.startswith(prefix + "."):
            return role
    return "batch"


def _annotate_roles(compiled, has_aux: bool) -> None:
    """Record in the model metadata what each input/output is and which output feeds
    which input on the next call, so that an app can drive the program."""
    inputs = {s.name: s for s in compiled.input_specs}
    rows_in = [dict(name=s.name, feature=s.mil_name, shape=list(s.io_shape), dtype=s.io_dtype,
                    role=_role(s.name)) for s in compiled.input_specs]
    rows_out = []
    for s in compiled.output_specs:
        role = _role(s.name)
        if role == "loss" and has_aux and s.name != "out.0":
            role = "aux"
        row = dict(name=s.name, feature=s.mil_name, shape=list(s.io_shape), dtype=s.io_dtype,
                   role=role)
        if role.startswith("new_"):
            row["feeds"] = inputs[s.name[len("new."):]].mil_name
        rows_out.append(row)
    meta = compiled.spec.description.metadata.userDefined
    meta["rlxjax.train"] = json.dumps({"state": "io", "inputs": rows_in, "outputs": rows_out})


def coreml_train_step(loss: Callable, optimizer, *, state: str = "io", target=None,
                      precision: str = "fp32", has_aux: bool = False, backend=None):
    """One Core ML program = forward + backward + ``optimizer`` update (optax).

    ``loss(params, *batch)`` returns a scalar (or ``(loss, aux)`` with ``has_aux``). Use:
    ``st = step.init(params); st, loss = step(st, *batch)``, ``step.fit(...)``,
    ``step.save("train.mlpackage")``. ``state="io"`` passes params and optimizer state in
    and out of every call (default target iOS17); ``state="mlstate"`` keeps them in Core ML
    states updated in place (target iOS18, the default for it; exact fp32 storage, see
    rlxjax/mlstate.py).
    """
    if state == "mlstate":
        target = "iOS18" if target is None else target
        require(get_target(target), "iOS18", "state='mlstate' (Core ML states)")
    target = "iOS17" if target is None else target
    if precision != "fp32":
        raise ArgumentError("training steps compute in fp32 (precision='fp32'): fp16 "
                            "gradients and optimizer moments lose the updates")
    return TrainStep(loss, optimizer, state=state, has_aux=has_aux, static_argnums=(),
                     target=target, precision=precision, backend=backend)


def export_inference(fn: Callable, params, *example_inputs, path=None, target: str = "iOS17",
                     precision: str = "fp32", backend=None):
    """Compile ``fn(params, *inputs)`` for inference with ``params`` baked in as weights
    (trained parameters become constants in the weight blob). Returns the ``Compiled``
    program; writes the ``.mlpackage`` too when ``path`` is given."""
    from .api import coreml_jit

    frozen = _numpy_tree(params)

    def infer(*inputs):
        return fn(frozen, *inputs)

    try:  # name the program's inputs after fn's own named parameters (after ``params``)
        sig = inspect.signature(fn)
        rest = list(sig.parameters.values())[1:]
        if rest and rest[0].kind in (rest[0].POSITIONAL_ONLY, rest[0].POSITIONAL_OR_KEYWORD):
            infer.__signature__ = sig.replace(parameters=rest)
    except (TypeError, ValueError):  # no signature (a builtin): 'inputs.0', ...
        pass

    infer.__name__ = getattr(fn, "__name__", "inference")
    compiled = coreml_jit(infer, target=target, precision=precision,
                          backend=backend).lower(*example_inputs).compile()
    if path is not None:
        compiled.save(path)
    return compiled
