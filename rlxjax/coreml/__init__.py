"""The Core ML format: RLX graph -> ML Program (MIL), validation, .mlpackage.

format.py is the format object the rest of rlxjax talks to (rlxjax/formats/), loaded.py
its loader. lower.py walks the graph and calls each op's lowering (rules/, one module per
op family, registered through registry.py) for a deployment target (targets.py, which
resolves target names without coremltools: importing this package imports nothing);
builder.py emits the MIL ops; mil.py walks a lowered program and mil_cse.py /
mil_linear_bias.py shrink it; validate.py loads it through coremltools' milproto loader;
package.py writes the .mlpackage (multifunction.py: several programs as the functions of
one); compress.py names the oldest target of each ``compress=`` scheme (the payloads are
format-neutral, rlxjax/compression/). coremltools' private API is used from ct_private.py
alone here (and, for the quantisers both formats share, rlxjax/compression/ct_optimize.py).
"""
