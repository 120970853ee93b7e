"""Frontend rules: gather / scatter (JAX's general dimension numbers and modes),
dynamic slices, cumulative reductions, sort / top_k.

JAX's ``gather`` and ``scatter`` are normalised onto the RLX ops ``gather_nd`` and
``scatter_nd`` (ir/indexing.py), whose indices are always in range:

1. the operand is transposed to ``batching dims + indexed dims + the other dims``;
2. operand batching dims (take_along_axis, vmap) become explicit index components built
   from iota constants, so one depth-K index addresses ``x[b..., i...]``;
3. out-of-range indices get JAX's meaning explicitly: ``clip`` clamps; gather
   ``fill`` clamps and then selects the fill value where any component was out of range;
   scatter ``fill``/``promise_in_bounds`` drop the update (XLA drops out-of-range scatter
   updates, and clamps out-of-range gather starts, which is what promise_in_bounds does
   on CPU);
4. the result is reshaped and transposed into JAX's layout (offset dims).

Windows wider than 1 on indexed dims (vmap of dynamic_slice / dynamic_update_slice,
``lax.gather`` of blocks, and JAX's gradients of these) become extra index batch axes
counting along each window, so gather_nd / scatter_nd still move one element per position;
JAX clamps (clip) or range-checks (fill / drop: the whole window) the window *start* into
``[0, dim - window]``.

Supported: every gather; every scatter whose dims that are not scattered to have full
windows (take, x[idx], x[:, idx], x[i, j], take_along_axis, embeddings,
x.at[...].set/add/mul/min/max, windowed forms, JAX's gradients of these). Other scatters
raise UnsupportedPrimitiveError naming the dimension numbers. ``sort`` takes any number of
lexicographic keys (``num_keys``, jnp.lexsort) and carries the other operands along.
"""
# importing registers the rules (in the order they had when this was one module)
from . import gather, scatter, dynamic_slice, cumulative, sort  # noqa: F401,E402
