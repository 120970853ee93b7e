"""The reference interpreter's accelerated path (backend ``"reference-fast"``): the same
loaded program as the oracle (``..interpreter.ReferenceProgram``), bit-identical results,
less Python around the numpy calls.

* ``program.py``: ``AcceleratedProgram``, the oracle with its op calls and block loop
  replaced;
* ``prepared.py``: the prepared numpy calls (``PreparedCall``) of the most frequent ops,
  their constant parameters decoded once;
* ``codegen.py``: the straight-line Python function a checked program then runs as.
"""
from .program import AcceleratedProgram

__all__ = ["AcceleratedProgram"]
