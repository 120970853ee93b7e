"""Flexible batch: its cost in MIL ops, and one program at batch 1, 7 and 64.

For each workload of tests/models.py, the loss (forward), ``coreml_grad`` and an adam
``coreml_train_step``, compiled once with a static batch and once with every batch
argument's axis 0 flexible in [1, 64]: non-const MIL ops of each (the flexible program
adds the ops that read the batch size and build runtime shapes), and the largest
difference from jax.jit of the flexible program's forward at batch 1, 7 and 64 on the
reference backend. A workload that cannot be flexible shows the DynamicShapeError.
Run: ``python bench/flexible.py``.
"""
from __future__ import annotations

import os
import sys
import time

import jax
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import rlxjax  # noqa: E402
from models import workloads  # noqa: E402

SIZES = (1, 7, 64)


def _ops(compiled) -> int:
    return compiled.cost_analysis()["mil_ops"]


def _batch_args(batch):
    """Which batch arguments carry the batch (every leaf's axis 0 the last argument's)."""
    size = np.shape(jax.tree_util.tree_leaves(batch[-1])[0])[0]
    return [all(np.ndim(x) >= 1 and np.shape(x)[0] == size
                for x in jax.tree_util.tree_leaves(b)) for b in batch]


def _resize(batch, n, rng):
    """The batch with axis 0 of every batch argument's leaves at size n (fresh values)."""
    keep = _batch_args(batch)

    def one(x):
        x = np.asarray(x)
        shape = (n,) + x.shape[1:]
        if x.dtype.kind == "f":
            return rng.standard_normal(shape).astype(x.dtype)
        return np.resize(x, shape)
    return tuple(jax.tree_util.tree_map(one, b) if k else b for b, k in zip(batch, keep))


def _flex(flex_names):
    return {nm: {0: (1, 64)} for nm in flex_names}


def row(name, loss, params, batch):
    names = [f"b{i}" for i in range(len(batch))]
    flex_names = [nm for nm, k in zip(names, _batch_args(batch)) if k]
    fn = eval(f"lambda p, {', '.join(names)}: loss(p, {', '.join(names)})", {"loss": loss})
    out = [name]
    aux = isinstance(jax.eval_shape(fn, params, *batch), tuple)  # (loss, aux)
    for kind in ("forward", "grad", "train_step"):
        def make(**kw):
            if kind == "forward":
                return rlxjax.coreml_jit(fn, backend="reference", **kw)
            if kind == "grad":
                return rlxjax.coreml_grad(fn, backend="reference", has_aux=aux, **kw)
            return rlxjax.coreml_train_step(fn, optax.adam(1e-3), backend="reference",
                                            has_aux=aux, **kw)
        args = (params, optax.adam(1e-3).init(params)) + tuple(batch) if kind == "train_step" \
            else (params,) + tuple(batch)
        static = _ops(make().lower(*args).compile())
        try:
            t0 = time.perf_counter()
            flexible = make(flexible=_flex(flex_names)).lower(*args).compile()
            secs = time.perf_counter() - t0
            out.append(f"{static} / {_ops(flexible)} ({secs:.1f}s)")
        except rlxjax.DynamicShapeError as e:
            out.append(f"{static} / refused: {str(e).split(' (')[0]}")
    for kind in ("forward", "grad"):
        try:  # ONE compiled program, checked by coremltools' loader, run at every size
            if kind == "forward":
                f, ref = rlxjax.coreml_jit(fn, backend="reference", flexible=_flex(flex_names)), fn
            else:
                f = rlxjax.coreml_grad(fn, backend="reference", has_aux=aux,
                                       flexible=_flex(flex_names))
                ref = jax.grad(fn, has_aux=aux)
            program = f.lower(params, *batch).compile()
            program.validate()
            rng = np.random.default_rng(0)
            err = 0.0
            for n in SIZES:
                b = _resize(batch, n, rng)
                got, want = program(params, *b), jax.jit(ref)(params, *b)
                for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
                    err = max(err, float(np.max(np.abs(np.asarray(g) - np.asarray(w)))))
            out.append(f"{err:.1e}")
        except rlxjax.DynamicShapeError:
            out.append("-")
    return out


def symbolic_row():
    """The transformer workload's loss lowered for jax.export.symbolic_shape inputs (batch
    symbol b, 1 <= b <= 64): one program, coremltools' loader, run at every size."""
    name, (loss, params, batch) = "transformer_block", workloads()["transformer_block"][:3]
    b, = jax.export.symbolic_shape("b", constraints=["b >= 1", "b <= 64"])
    structs = [jax.ShapeDtypeStruct((b,) + np.shape(x)[1:], np.asarray(x).dtype)
               for x in batch]
    rows = []
    for kind, make, ref in (("forward", rlxjax.coreml_jit, loss),
                            ("coreml_grad", rlxjax.coreml_grad, jax.grad(loss))):
        program = make(loss, backend="reference").lower(params, *structs).compile()
        program.validate()
        rng, err = np.random.default_rng(1), 0.0
        for n in SIZES:
            bn = _resize(tuple(batch), n, rng)
            got, want = program(params, *bn), jax.jit(ref)(params, *bn)
            for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
                err = max(err, float(np.max(np.abs(np.asarray(g) - np.asarray(w)))))
        rows.append(f"{name} {kind} lowered with symbolic_shape('b'), 1 <= b <= 64: one "
                    f"program, loader passed, batch {SIZES}: max |diff| {err:.1e}")
    return rows


def main():
    print(f"non-const MIL ops static / flexible batch [1, 64] (flexible compile s); max |diff| "
          f"vs jax.jit of one flexible forward / coreml_grad program (coremltools' loader "
          f"passed) run at batch {SIZES} (reference backend)")
    header = ["workload", "forward", "coreml_grad", "train_step (adam)", "fwd max |diff|",
              "grad max |diff|"]
    rows = [row(name, *w[:2], w[2]) for name, w in sorted(workloads().items())]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(wd) for c, wd in zip(r, widths)))
    for line in symbolic_row():
        print(line)


if __name__ == "__main__":
    main()
