"""What a training step reads and returns (``TrainState``), and, for ``state="mlstate"``,
the Core ML state on the device that holds it between steps (``DeviceState``)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Sequence

import jax
import numpy as np

from ..errors import RlxError
from .checkpoint import load_checkpoint, save_checkpoint
from ..states.mlstate import host_pack, host_unpack

if TYPE_CHECKING:  # pragma: no cover
    from .program import TrainProgram


class DeviceState:
    """The device state of one compiled mlstate program (``MLModel.make_state()`` on
    Core ML, a ``ReferenceState`` on the reference backend, a worker's states on Core AI),
    updated in place by each step.
    ``version`` counts the steps taken on it, so a TrainState from before the latest step
    is recognised as consumed."""

    def __init__(self, program: "TrainProgram"):
        self.program = program
        self.layout = program.state_layout
        self.mil_names: Dict[str, str] = program.layout.state_names  # 'state.f32.exp' -> name
        self.handle = program.compiled.make_state()
        self.version = 0

    @property
    def compiled(self):
        return self.program.compiled

    def write_leaves(self, leaves: Sequence[np.ndarray]) -> None:
        for name, arr in host_pack(self.layout, leaves).items():
            self.handle.write_state(self.mil_names[name], arr)

    def read_pieces(self) -> Dict[str, np.ndarray]:
        return {name: np.asarray(self.handle.read_state(self.mil_names[name]), dtype)
                for name, _, _, dtype in self.layout.state_types()}

    def read_leaves(self) -> List[np.ndarray]:
        return host_unpack(self.layout, self.read_pieces())

    def read_trees(self):
        """(params, opt_state) as pytrees of numpy arrays."""
        leaves = self.read_leaves()
        n = self.layout.n_params
        ptree, stree = self.program.trees
        return (jax.tree_util.tree_unflatten(ptree, leaves[:n]),
                jax.tree_util.tree_unflatten(stree, leaves[n:]))


def consumed_error() -> RlxError:
    return RlxError("this TrainState was consumed: state='mlstate' updates the Core ML state "
                    "in place, so only the TrainState the latest step returned is current "
                    "(read st.params before stepping to keep a snapshot)")


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
        self.device = device       # DeviceState or None
        self._version = version    # device.version this state corresponds to

    @property
    def live(self) -> bool:
        """True when ``device`` holds exactly this state (not yet stepped past)."""
        return self.device is not None and self.device.version == self._version

    def _pull(self) -> None:
        if self._on_host:
            return
        if not self.live:
            raise consumed_error()
        self._params, self._opt_state = self.device.read_trees()
        self._on_host = True

    @property
    def params(self):
        self._pull()
        return self._params

    @property
    def opt_state(self):
        self._pull()
        return self._opt_state

    def leaves(self) -> List[np.ndarray]:
        """The parameter then optimizer-state leaves."""
        return jax.tree_util.tree_leaves((self.params, self.opt_state))

    def __repr__(self):
        where = "device" if not self._on_host else "host"
        return f"TrainState(step={self.step}, on {where})"

    def save(self, path) -> str:
        """Write a checkpoint atomically (a failure leaves the previous file or none)."""
        return save_checkpoint(path, self.step, self.leaves())

    @classmethod
    def load(cls, path, like: "TrainState") -> "TrainState":
        """Read a checkpoint written by ``save`` into the structure of ``like``."""
        step, leaves = load_checkpoint(os.fspath(path), like.leaves())
        tree = jax.tree_util.tree_structure((like.params, like.opt_state))
        params, opt_state = jax.tree_util.tree_unflatten(tree, leaves)
        return cls(params, opt_state, step)

    @classmethod
    def load_params(cls, path, like: "TrainState", *, strict: bool = True) -> "TrainState":
        """``like`` with its parameters read from the safetensors file ``path``
        (training/params_io.py; names are pytree paths joined by '/'); its optimizer state
        and step are kept."""
        from .params_io import load_params

        return cls(load_params(path, like.params, strict=strict), like.opt_state, like.step)
