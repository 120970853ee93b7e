"""What a format provides (rlxjax/formats/__init__.py registers them).

``api.py``, ``training/`` and ``load.py`` talk to these interfaces and to no format module:

* ``Format``: resolves target names to its ``Target`` objects (once, where a user's string
  enters), compiles a ``Program`` to an ``Executable``, writes several executables as one
  multifunction package, loads a package, and compresses frozen weights;
* ``Executable``: one compiled program - its signature (``IOSpec``s), its metadata map,
  its states; it runs on a named backend, saves atomically, validates itself and
  describes its operations.

Behaviour shared by every format (the call-time checks, the metadata schema, the host
parts of randomness, zero-size leaves and NaN signs) is not here but in rlxjax/calling.py,
rlxjax/metadata.py and the frontend, which the formats use.
"""
from __future__ import annotations

import abc
from typing import Dict, MutableMapping, Sequence, Tuple


class Target(abc.ABC):
    """A deployment target of one format (Core ML: an OS version and its opset)."""

    name: str

    @abc.abstractmethod
    def at_least(self, other: str) -> bool:
        """Whether this target is ``other`` or newer."""

    @abc.abstractmethod
    def require(self, minimum: str, feature: str) -> None:
        """Raise ``TargetError`` naming ``feature`` when this target is older than
        ``minimum``."""


class Executable(abc.ABC):
    """One compiled program of a format."""

    input_specs: tuple
    output_specs: tuple
    #: the operation type of a constant (``operations``); op histograms leave them out
    const_op: str = "const"

    @property
    @abc.abstractmethod
    def metadata(self) -> MutableMapping[str, str]:
        """The package metadata map (keys: rlxjax/metadata.py)."""

    @property
    @abc.abstractmethod
    def state_names(self) -> Tuple[str, ...]:
        """The program's states (empty for a stateless program)."""

    @property
    def state_graph_names(self) -> Dict[str, str]:
        """Each state's RLX graph input name ('state.f32.exp') -> its name in the program."""
        return {}

    #: where rlxjax's metadata lists the program's states (``state_rows``): in
    #: ``rlxjax.io`` beside the inputs and outputs, or (False) under ``rlxjax.states``, for
    #: a format that keeps the two apart (Core AI)
    states_in_io: bool = True

    def state_rows(self) -> list:
        """One row per state for the metadata: ``{name (graph input), mil_name, shape,
        dtype}`` (empty for a stateless program)."""
        return []

    def own_metadata(self) -> Dict[str, object]:
        """Keys only this format reads back (its runner's), written after rlxjax's own by
        ``metadata.describe``: the format's compile writes no metadata itself."""
        return {}

    @abc.abstractmethod
    def runner(self, backend: str):
        """An object with ``run(feeds, state=None) -> {feature: array}`` and
        ``make_state()``, running this program on ``backend``."""

    @abc.abstractmethod
    def save(self, path) -> str:
        """Write the package at ``path`` atomically; return its absolute path."""

    @abc.abstractmethod
    def validate(self):
        """Check the program with the format's own loader (raise ``ValidationError``)."""

    @abc.abstractmethod
    def operations(self) -> list:
        """The program's operations in program order (each with a ``type``)."""

    @abc.abstractmethod
    def cost(self) -> dict:
        """A static cost model of the program (``Compiled.cost_analysis``)."""

    @abc.abstractmethod
    def as_text(self) -> str:
        """The program as text."""

    def memory_program(self):
        """The program's values in program order, for ``Compiled.memory_analysis``
        (rlxjax/memory.py ``ValueProgram``); None when the format does not describe them."""
        return None


class Format(abc.ABC):
    name: str
    suffix: str
    default_target: str
    #: whether the format lowers the fused attention op with a bool mask (rlxjax/ir/
    #: attention.py: fully masked rows uniform); without it recognize_attention leaves such
    #: attention (a ``where`` mask that is an input, or has a fully masked row) decomposed
    attention_bool_masks: bool = False
    #: whether ``compile`` lowers the RLX op ``remat_barrier`` (ir/control.py: what keeps a
    #: ``jax.checkpoint``'s recomputation from being merged into the forward pass); when
    #: not, ``Lowered.compile`` removes the barriers first (the values are the same)
    lowers_remat_barrier: bool = False

    @abc.abstractmethod
    def target(self, target) -> Target:
        """``target`` (a name, or a ``Target`` of this format, returned as it is) resolved;
        ``TargetError`` for an unknown name."""

    @abc.abstractmethod
    def compile(self, program, *, keep_weight_layout: bool = False) -> Executable:
        """Lower ``program`` (rlxjax/program.py); its metadata is written afterwards, in one
        place (``metadata.describe``), from what the executable says of itself.
        ``keep_weight_layout``: constants keep their layout, so that a weight shared with
        another function of a multifunction package is stored once."""

    @abc.abstractmethod
    def save_functions(self, functions: Sequence[Tuple[str, Executable]], default: str,
                       path) -> str:
        """Write ``functions`` (name, executable) as one package with ``default`` as its
        default function."""

    @abc.abstractmethod
    def load(self, path, backend=None, function=None):
        """The package at ``path`` ready to run (``rlxjax.load``)."""

    @abc.abstractmethod
    def check_compression(self, scheme, target) -> None:
        """Refuse an unknown ``compress=`` scheme or a target too old for it."""

    def compress_leaf(self, arr, scheme):
        """The compressed storage of one frozen weight (None: stored as it is): the
        format-neutral schemes' payload (rlxjax/compression/schemes.py), which every format
        so far stores; a format with a storage of its own overrides this."""
        from ..compression.schemes import compress_leaf

        return compress_leaf(arr, scheme)

    def describe(self) -> Dict[str, str]:
        return {"name": self.name, "suffix": self.suffix, "default_target": self.default_target}
