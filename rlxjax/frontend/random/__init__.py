"""Randomness in a traced function, by the ``random=`` option of ``coreml_jit`` and the
training step (docs/errors.md, docs/numerics.md):

* ``liveness.py``: every mode. Dead randomness (draws, keys, uint32 counters whose results
  reach no output) is pruned before any rule runs; with ``random=None`` live randomness
  is refused, naming the draw and the user's line. Also the facts the other modules read
  (which primitives draw, which values are keys, where an equation comes from);
* ``inputs.py``: ``random="inputs"``: the jaxpr split into a host part (key arithmetic and
  draws, run with JAX on each call) and a device part, each host value the device reads a
  program input;
* ``scan.py``: for ``"inputs"``, a scan that draws and computes on device values split into
  a host scan and a device scan;
* ``meta.py``: the distribution of each random input, for the package metadata;
* ``device.py``: ``random="device"``: the host part's draws made by Core ML's random ops
  instead (the ``rlx_random_draw`` primitive and its rule);
* ``device_scan.py``: for ``"device"``, a host scan of draws re-traced as one batched draw.

The frontend rules of JAX's random primitives (refused where they are reached) are in
rules/random.py.
"""
