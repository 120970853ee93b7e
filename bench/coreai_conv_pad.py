"""Conv padding and phase-interleave candidates timed on the Core AI runtime.

Ways to zero-pad a conv input and to interleave a strided conv's input-gradient phases on
Core AI's runtime (coreai-core), each a one-op program (or the op + ``conv2d``), timed round
robin in one process (medians, ms), each output checked against numpy / ``jax.lax``:

- padding a [N, C, H, W] input by 1 on H and W (a 3x3 SAME conv's input): Core AI's ``pad``
  op (what coreai-torch emits), ``gather_along_axis`` + ``where`` (rlxjax's ``lax_pad``),
  two ``concat``s of zero blocks, one ``slice_update`` into a splat zero constant (rlxjax's
  conv padding, coreai/ops_conv.py ``zero_pad``) or into a ``broadcast_to`` of zero, each
  alone and followed by the conv; and the conv alone on the unpadded input;
- four phase outputs [N, O, U, U] interleaved into [N, O, 2U, 2U]: ``concat`` + ``transpose``
  against four strided ``slice_update``s into a splat zero constant.

Run: ``python bench/coreai_conv_pad.py [repeats] [N C H W O]``.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rlxjax.coreai import ca_private as cp  # noqa: E402
from rlxjax.coreai.ops_base import Ctx  # noqa: E402
from rlxjax.coreai.ops_shape import lax_pad  # noqa: E402
from rlxjax.ir import DType  # noqa: E402


def _c(v, dt):
    return cp.constant(np.asarray(v, dt).reshape(-1))


def pad_cases(ca, n, c, h, w):
    i32 = lambda v: _c(v, np.int32)  # noqa: E731
    u32 = lambda v: _c(v, np.uint32)  # noqa: E731

    def conv(x, k):
        return ca.conv2d(x, k, u32([1, 1]), u32([1, 1]), cp.constant(np.uint32(1)))

    def pad_op(x):
        return ca.pad(x, u32([0, 0, 0, 0, 1, 1, 1, 1]), cp.constant(np.float32(0)))

    def gather(x):
        ctx = Ctx(ca)
        cfg = [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)]
        return lax_pad(ctx, x, [n, c, h, w], cfg, ctx.scalar(0, DType.f32), DType.f32)

    def concat(x):
        zw = cp.splat(np.float32(0), [n, c, h, 1])
        x = ca.concat(cp.constant(np.int32(3)), [zw, x, zw])
        zh = cp.splat(np.float32(0), [n, c, 1, w + 2])
        return ca.concat(cp.constant(np.int32(2)), [zh, x, zh])

    def slice_update(x, zeros=None):
        z = cp.splat(np.float32(0), [n, c, h + 2, w + 2]) if zeros is None else zeros
        return ca.slice_update(z, i32([0, 0, 1, 1]), i32([n, c, h + 1, w + 1]),
                               i32([1, 1, 1, 1]), x)

    def slice_update_b(x):
        ctx = Ctx(ca)
        return slice_update(x, ctx.broadcast(ctx.scalar(0, DType.f32), [n, c, h + 2, w + 2],
                                             DType.f32))

    pads = {"pad op": pad_op, "gather + where": gather, "concat x2": concat,
            "slice_update": slice_update, "slice_update (broadcast_to)": slice_update_b}
    cases = {name: (lambda x, k, f=f: f(x), "pad") for name, f in pads.items()}
    cases.update({f"{name} + conv2d": (lambda x, k, f=f: conv(f(x), k), "conv")
                  for name, f in pads.items()})
    cases["conv2d unpadded (VALID)"] = (lambda x, k: conv(x, k), "valid")
    return cases


def interleave_cases(ca, n, o, u):
    i32 = lambda v: _c(v, np.int32)  # noqa: E731
    u32 = lambda v: _c(v, np.uint32)  # noqa: E731

    def concat_t(ys):
        y = ca.concat(cp.constant(np.int32(1)), [ca.reshape(v, i32([n, 1, o * u * u]))
                                                 for v in ys])
        y = ca.transpose(ca.reshape(y, i32([n, 2, 2, o, u, u])), u32([0, 3, 4, 1, 5, 2]))
        return ca.reshape(y, i32([n, o, 2 * u, 2 * u]))

    def slice_updates(ys):
        z = cp.splat(np.float32(0), [n, o, 2 * u, 2 * u])
        for k, y in enumerate(ys):
            ph, pw = divmod(k, 2)
            z = ca.slice_update(z, i32([0, 0, ph, pw]),
                                i32([n, o, ph + 2 * u - 1, pw + 2 * u - 1]), i32([1, 1, 2, 2]), y)
        return z

    return {"concat + transpose": concat_t, "4 strided slice_updates": slice_updates}


async def _run(programs, feeds, repeats):
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    nd = {k: NDArray(np.ascontiguousarray(v)) for k, v in feeds.items()}
    ctxs, fns, outs = [], {}, {}
    try:
        for name, path in programs.items():
            ctx = AIModelAsset.load(path).executable()
            model = await ctx.__aenter__()
            ctxs.append(ctx)
            fns[name] = model.load_function("main")
            outs[name] = (await fns[name](nd))["y"].numpy().copy()  # warms up
        times = {k: [] for k in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                await fn(nd)
                times[name].append(time.perf_counter() - t0)
        return {k: statistics.median(t) for k, t in times.items()}, outs
    finally:
        for ctx in reversed(ctxs):
            await ctx.__aexit__(None, None, None)


def _save(folder, name, inputs, out_shape, body):
    prog = cp.build([cp.Function("main", inputs, [], [("y", tuple(out_shape), "float32")],
                                 lambda a, r: ([body(*a)], {}))])
    path = os.path.join(folder, name.replace(" ", "_").replace("/", "") + ".aimodel")
    cp.save(prog, path, {})
    return path


def main(argv=None):
    import jax

    argv = sys.argv[1:] if argv is None else list(argv)
    nums = [int(a) for a in argv if a.isdigit()]
    repeats = nums[0] if nums else 9
    n, c, h, w, o = nums[1:6] if len(nums) >= 6 else (32, 32, 28, 28, 32)
    ca = cp.coreai()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    k = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    same = np.asarray(jax.lax.conv_general_dilated(x, k, (1, 1), [(1, 1), (1, 1)]))
    valid = np.asarray(jax.lax.conv_general_dilated(x, k, (1, 1), "VALID"))
    want = {"pad": padded, "conv": same, "valid": valid}
    folder = tempfile.mkdtemp()
    try:
        cases = pad_cases(ca, n, c, h, w)
        ins = [("x", (n, c, h, w), "float32"), ("k", (o, c, 3, 3), "float32")]
        paths = {name: _save(folder, name, ins, want[kind].shape, fn)
                 for name, (fn, kind) in cases.items()}
        t, outs = asyncio.run(_run(paths, {"x": x, "k": k}, repeats))
        print(f"zero padding of a {n}x{c}x{h}x{w} input by 1 on H and W, then a 3x3 conv to {o} "
              f"channels: Core AI runtime, round robin, median of {repeats} calls (ms)")
        for name, (_, kind) in cases.items():
            ok = np.array_equal(outs[name], want[kind]) if kind == "pad" else \
                np.allclose(outs[name], want[kind], rtol=1e-4, atol=1e-4)
            print(f"  {name:<40} {t[name] * 1e3:>9.2f}   {'matches' if ok else 'DIFFERS'}")
        u = h // 2
        ys = [rng.standard_normal((n, o, u, u)).astype(np.float32) for _ in range(4)]
        full = np.zeros((n, o, 2 * u, 2 * u), np.float32)
        for i, y in enumerate(ys):
            full[:, :, i // 2::2, i % 2::2] = y
        cases = interleave_cases(ca, n, o, u)
        ins = [(f"y{i}", (n, o, u, u), "float32") for i in range(4)]
        paths = {name: _save(folder, "il_" + name, ins, full.shape, lambda *a, f=f: f(list(a)))
                 for name, f in cases.items()}
        t, outs = asyncio.run(_run(paths, {f"y{i}": y for i, y in enumerate(ys)}, repeats))
        print(f"four {n}x{o}x{u}x{u} phases interleaved into {n}x{o}x{2 * u}x{2 * u} (ms)")
        for name in cases:
            ok = np.array_equal(outs[name], full)
            print(f"  {name:<40} {t[name] * 1e3:>9.2f}   {'exact' if ok else 'DIFFERS'}")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
