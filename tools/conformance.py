"""Run JAX's own primitive test harnesses through rlxjax and compare with JAX.

    python tools/conformance.py                   # every applicable harness, fwd + grad
    python tools/conformance.py --group sort      # one group (repeatable)
    python tools/conformance.py --sample 3        # the deterministic sample the tests run
    python tools/conformance.py --write           # also write the table in docs/primitives.md
    python tools/conformance.py --format aimodel  # the same harnesses on Apple's Core AI runtime

JAX ships a table of primitive test cases in its wheel,
``jax._src.internal_test_util.test_harnesses.all_harnesses``. For every harness whose
dtype Core ML can carry (f32, f16, i32, i8, u8, bool) this runs ``harness.dyn_fun`` on
``harness.dyn_args_maker(rng)`` through ``rlxjax.coreml_jit`` (compiled, validated by
coremltools' MIL loader, run on the reference backend) and through ``jax.jit``, and
compares. Every float32 harness also compiles the gradient of a weighted sum of its float
outputs with respect to its float inputs (``coreml_grad`` against ``jax.grad``).

Each run is one of:

- ``pass``: same result: integers and booleans exactly; floats within the tolerance
  element-wise, or else, measured against the float64 result (JAX in x64 mode on the
  inputs widened), with a worst error within the tolerance of the output's largest
  magnitude or no more than twice XLA's own worst error (a sum's rounding error scales
  with its terms, not its value; the detail says so);
- ``wrong``: a different result;
- ``crash``: an exception that is not an rlxjax error (a bug: bad input must get a clear
  rlxjax error) or a time-out;
- ``unsupported``: an rlxjax error (``rlxjax.errors.RlxError``) that says what is not
  supported;
- ``n/a``: not applicable, with the reason: a dtype Core ML cannot carry, a case JAX
  itself does not implement on CPU or rejects, or no float input/output to differentiate;
- ``valid-diff``: a difference JAX's own semantics allow (see ``VALID_DIFFERENCES``).
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import signal
import subprocess
import threading
import sys
import traceback
import zlib

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)

CORE_ML_DTYPES = ("float32", "float16", "int32", "int8", "uint8", "bool")
TIMEOUT_S = 120
#: the format the harnesses compile to ("mlpackage": run on the reference backend;
#: "aimodel": on Core AI's runtime, each program in its worker process, whose death or
#: hang is a crash); set by ``--format``, inherited by the worker processes
FORMAT = os.environ.get("RLXJAX_CONFORMANCE_FORMAT", "mlpackage")

# Tolerances by dtype (rtol, atol). The reference backend computes in numpy float32 and
# XLA:CPU with its own polynomial approximations: transcendental functions differ by a few
# ulp. A harness's own ``tol`` wins when it is larger.
TOL = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2)}
GRAD_TOL = (1e-4, 1e-4)


def harnesses():
    from jax._src.internal_test_util import test_harnesses as th
    return th.all_harnesses


def _dtype_name(dt) -> str:
    return np.dtype(dt).name


def _canonical(x):
    import jax
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def _args(h):
    rng = np.random.RandomState(zlib.crc32(h.fullname.encode()) & 0x7FFFFFFF)
    return h.dyn_args_maker(rng)


def _leaves(tree):
    import jax
    return jax.tree_util.tree_leaves(tree)


def not_applicable(h) -> str | None:
    """Why a harness does not apply to Core ML, or None."""
    if h.dtype is None or _dtype_name(h.dtype) not in CORE_ML_DTYPES:
        return f"dtype {h.dtype and _dtype_name(h.dtype)} (Core ML carries {', '.join(CORE_ML_DTYPES)})"
    if not h.filter("cpu"):
        return "JAX does not implement it on CPU"
    return None


def _compare(got, want, rtol, atol, truth=None) -> str | None:
    """None when equal, else what differs. With ``truth`` (the float64 result), a float
    output that is not within the tolerance element-wise may still pass against the truth
    (see the module docstring)."""
    import jax
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    if g_tree != w_tree:
        return f"structure {g_tree} != {w_tree}"
    t_leaves = [None] * len(w_leaves) if truth is None else jax.tree_util.tree_leaves(truth)
    for i, (g, w, t) in enumerate(zip(g_leaves, w_leaves, t_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)} != {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                bad = int(np.sum(g != w))
                return f"output {i}: {bad}/{w.size} elements differ"
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            if not np.array_equal(np.isnan(g64), np.isnan(w64)):
                return f"output {i}: NaN positions differ"
            ok = ~np.isnan(w64)
            if not np.array_equal(g64[ok & np.isinf(w64)], w64[ok & np.isinf(w64)]):
                return f"output {i}: infinities differ"
            fin = ok & np.isfinite(w64)
            if not np.all(np.isfinite(g64[fin])):
                return f"output {i}: non-finite where JAX is finite"
            err = np.abs(g64[fin] - w64[fin])
            lim = atol + rtol * np.abs(w64[fin])
            if not np.any(err > lim):
                continue
            if t is not None and np.shape(t) == w.shape:
                # Against the float64 truth, array-wise: the worst error within the
                # tolerance of the array's largest magnitude (accumulations: a sum's error
                # scales with its terms, not with its value), or no worse than twice XLA's.
                t64 = np.asarray(t, np.float64)[fin]
                worst = np.max(np.abs(g64[fin] - t64))
                xla = np.max(np.abs(w64[fin] - t64))
                if worst <= max(atol + rtol * np.max(np.abs(t64)), 2 * xla):
                    continue
                return (f"output {i}: worst error vs float64 {worst:.3g} (XLA's {xla:.3g}, "
                        f"largest |value| {np.max(np.abs(t64)):.3g})")
            k = int(np.argmax(err - lim))
            return (f"output {i}: {int(np.sum(err > lim))}/{w.size} elements beyond "
                    f"rtol={rtol:g} atol={atol:g}; worst {g64[fin][k]!r} vs "
                    f"{w64[fin][k]!r}")
    return None


def _tol(h, dtype_name):
    rtol, atol = TOL.get(dtype_name, (0.0, 0.0))
    t = h.params.get("tol")
    if t is not None:
        rtol, atol = max(rtol, t), max(atol, t)
    return rtol, atol


def _unstable_sort_ties(h, got, want):
    """``lax.sort(..., is_stable=False)``: equal keys may come out in any order. Valid when
    the keys are JAX's and the rows (one element of every operand) are the same multiset."""
    if h.params.get("is_stable", True) or not isinstance(want, (list, tuple)):
        return None
    n_keys, axis = h.params.get("num_keys", 1), h.params.get("dimension", -1)
    got = [np.moveaxis(np.asarray(g), axis, -1) for g in got]
    want = [np.moveaxis(np.asarray(w), axis, -1) for w in want]
    if not all(np.array_equal(g, w, equal_nan=w.dtype.kind == "f")
               for g, w in zip(got[:n_keys], want[:n_keys])):
        return None

    def rows(arrs):
        flat = np.stack([a.reshape(-1, a.shape[-1]).astype(np.float64) for a in arrs], -1)
        return [sorted(map(tuple, line)) for line in flat]
    if rows(got) != rows(want):
        return None
    return ("is_stable=False: equal keys in another order (the same keys and the same rows "
            "as JAX)")


# Differences JAX's own semantics allow: group -> check(h, got, want) giving the
# explanation when the difference is one of them, else None.
VALID_DIFFERENCES = {"sort": _unstable_sort_ties}

#: Harnesses per group the default test run takes (tests/repo/test_conformance.py).
DEFAULT_SAMPLE = 1

#: What rlxjax refuses on purpose: (group, text the error detail contains or None, why).
#: An "unsupported" outcome not listed here fails tests/repo/test_conformance.py.
UNSUPPORTED = [
    ("random_gamma", None, "jax.random.gamma samples by rejection in a loop that reads its key "
                           "next to the shape parameter: random='inputs' cannot draw it on "
                           "the host, and the default refuses live draws"),
    ("bitcast_convert_type", "bitcast from", "a bitcast between floats and integers needs bit "
                                             "access, which MIL does not have"),
    ("eigh", "'eigh'", "eigenvectors are unique only up to sign, and LAPACK's choice cannot "
                       "be reproduced: rlxjax does not lower eigh"),
    ("top_k", "sign bit set", "a -NaN input: XLA ranks -NaN below -inf, Core ML cannot read "
                              "a NaN's sign (no bit cast), so each call refuses a -NaN that "
                              "reaches a top_k (docs/numerics.md)"),
    ("svd", "compute_uv=True", "singular vectors are unique only up to sign, and LAPACK's "
                               "choice cannot be reproduced: rlxjax computes singular values"),
]


#: Wrong answers rlxjax cannot avoid on Core ML, by harness name: still counted as wrong,
#: explained in the table; tests/repo/test_conformance.py expects them to fail (strict xfail).
KNOWN_WRONG: dict = {}


def unsupported_reason(h, kind, detail):
    """Why rlxjax refuses this harness (from ``UNSUPPORTED``), or None if it should not."""
    for group, text, why in UNSUPPORTED:
        if group == h.group_name and (text is None or text in detail):
            return why
    return None


def _error_outcome(e: BaseException):
    from rlxjax.errors import RlxError
    if isinstance(e, RlxError):
        return "unsupported", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{os.path.relpath(f.filename, ROOT)}:{f.lineno}" for f in reversed(tb)
                  if "rlxjax" in f.filename), tb[-1].filename if tb else "?")
    return "crash", f"{type(e).__name__}: {str(e).splitlines()[0][:240] if str(e) else ''} [{where}]"


def _jit_options(backend):
    """coreml_jit / coreml_grad options of the format under test."""
    if FORMAT == "aimodel":
        return {"format": "aimodel", "backend": "coreai"}
    return {"backend": backend}


def run_forward(h, backend="reference"):
    import jax
    import rlxjax
    why = not_applicable(h)
    if why:
        return "n/a", why
    try:
        args = [_canonical(a) for a in _args(h)]
        want = jax.jit(h.dyn_fun)(*args)
    except Exception as e:  # noqa: BLE001 - JAX rejects it: nothing to compare with
        return "n/a", f"JAX rejects it: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    for leaf in _leaves(want) + args:
        if _dtype_name(np.asarray(leaf).dtype) not in CORE_ML_DTYPES:
            return "n/a", f"an input or output is {np.asarray(leaf).dtype}"
    random = None
    try:
        try:
            compiled = rlxjax.coreml_jit(h.dyn_fun, **_jit_options(backend)
                                         ).lower(*args).compile()
        except rlxjax.UnsupportedPrimitiveError as e:
            if "random='inputs'" not in str(e):
                raise
            # a live random draw: the option the error names (the draws are JAX's own)
            random = "inputs"
            compiled = rlxjax.coreml_jit(h.dyn_fun, random=random, **_jit_options(backend)
                                         ).lower(*args).compile()
        compiled.validate()
        got = compiled(*args)
    except Exception as e:  # noqa: BLE001 - classified
        status, detail = _error_outcome(e)
        return status, (f"with random='inputs': {detail}" if random else detail)
    rtol, atol = _tol(h, _dtype_name(h.dtype))
    status, detail = _judge(got, want, rtol, atol, lambda: _float64(h.dyn_fun, args))
    if status == "pass" and not compiled.output_specs and not compiled.state_names:
        # nothing ran on the device: every output is JAX's own host computation (e.g. the
        # random='inputs' draws), as the program computes it for any user
        detail = "every output is computed on the host (no device program)"
    valid = VALID_DIFFERENCES.get(h.group_name)
    if status == "wrong" and valid is not None:
        why = valid(h, got, want)
        if why:
            return "valid-diff", f"{why} (vs JAX: {detail})"
    return status, detail


def _float64(fun, args):
    """``fun`` on ``args`` with float inputs widened to float64 (x64 mode), or None."""
    import jax
    try:
        with jax.enable_x64(True):
            wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args]
            return jax.tree_util.tree_map(np.asarray, jax.jit(fun)(*wide))
    except Exception:  # noqa: BLE001 - no float64 truth for this one
        return None


def _judge(got, want, rtol, atol, truth):
    diff = _compare(got, want, rtol, atol)
    if diff is None:
        return "pass", ""
    t = truth() if "beyond" in diff else None
    if t is not None and _compare(got, want, rtol, atol, t) is None:
        return "pass", f"as close to float64 as XLA (vs XLA: {diff})"
    return "wrong", diff


def _grad_setup(h):
    """(loss, argnums, args) for the gradient run, or a reason string."""
    import jax
    import jax.numpy as jnp
    args = [_canonical(a) for a in _args(h)]
    for a in args:
        if _dtype_name(a.dtype) not in CORE_ML_DTYPES:
            return f"an input is {a.dtype}"
    argnums = tuple(i for i, a in enumerate(args) if a.dtype == np.float32)
    if not argnums:
        return "no float32 input"
    out = jax.eval_shape(h.dyn_fun, *args)
    leaves = _leaves(out)
    if not any(np.dtype(o.dtype) == np.float32 for o in leaves):
        return "no float32 output"
    for o in leaves:
        if _dtype_name(o.dtype) not in CORE_ML_DTYPES:
            return f"an output is {np.dtype(o.dtype)}"
    rng = np.random.RandomState(1234)
    weights = [rng.uniform(0.5, 1.5, o.shape).astype(np.float32)
               if np.dtype(o.dtype) == np.float32 else None for o in leaves]

    def loss(*xs):
        outs = _leaves(h.dyn_fun(*xs))
        return sum(jnp.sum(o * w) for o, w in zip(outs, weights) if w is not None)
    return loss, argnums, args


def run_grad(h, backend="reference"):
    import jax
    import rlxjax
    why = not_applicable(h)
    if why:
        return "n/a", why
    if _dtype_name(h.dtype) != "float32":
        return "n/a", "gradients are checked on float32 harnesses"
    try:
        setup = _grad_setup(h)
        if isinstance(setup, str):
            return "n/a", setup
        loss, argnums, args = setup
        want = jax.jit(jax.grad(loss, argnums=argnums))(*args)
    except Exception as e:  # noqa: BLE001
        return "n/a", f"JAX rejects it: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    try:
        got = rlxjax.coreml_grad(loss, argnums=argnums, **_jit_options(backend))(*args)
    except Exception as e:  # noqa: BLE001 - classified
        return _error_outcome(e)
    status, detail = _judge(got, want, *GRAD_TOL,
                            lambda: _float64(jax.grad(loss, argnums=argnums), args))
    if status == "wrong":
        why = _tool("conformance_pib").promise_in_bounds_difference(
            loss, argnums, args, got, _compare, GRAD_TOL)
        if why:
            return "valid-diff", f"{why} (vs JAX: {detail})"
    return status, detail


def _tool(name):
    """A sibling module of this tool (tools/ need not be on sys.path)."""
    import importlib.util
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


@functools.lru_cache(maxsize=None)
def _by_name():
    return {h.fullname: h for h in harnesses()}


def _run_one(name, kind):
    h = _by_name()[name]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        status, detail = (run_forward if kind == "fwd" else run_grad)(h)
    except _Timeout:
        status, detail = "crash", f"timed out after {TIMEOUT_S} s"
    except Exception as e:  # noqa: BLE001 - the runner itself must not die
        status, detail = "crash", f"runner: {type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    return {"group": h.group_name, "name": h.fullname, "kind": kind, "dtype":
            None if h.dtype is None else _dtype_name(h.dtype), "status": status,
            "detail": detail}


def _worker():
    """Run the jobs named on stdin (``harness-name kind`` per line), one JSON line each.
    By name, not by index: JAX builds ``all_harnesses`` partly from sets of dtypes, and its
    order can differ between processes (measured: 22 of abs / neg / sign's 37 harnesses
    under another index in the workers), so an index named another harness there."""
    for line in sys.stdin:
        name, kind = line.rstrip("\n").rsplit(" ", 1)
        print(json.dumps(_run_one(name, kind)), flush=True)


def run_jobs(jobs, n_procs: int):
    """Run jobs in ``n_procs`` worker processes; a worker that dies (a segfault, an abort in
    a library) marks its current job a crash and is replaced for the rest of its share."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    bar = tqdm(total=len(jobs)) if tqdm else None
    lock = threading.Lock()
    results = {}
    hs = harnesses()

    def shard(todo):
        while todo:
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 cwd=ROOT)
            def feed(p=p, todo=todo):  # from a thread: the worker's answers are read meanwhile
                try:
                    p.stdin.write("".join(f"{hs[i].fullname} {k}\n" for i, k in todo))
                    p.stdin.close()
                except (BrokenPipeError, OSError):
                    pass  # the worker died; its answers so far are read below
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            done = 0
            for line in p.stdout:
                r = json.loads(line)
                with lock:
                    results[todo[done]] = r
                    if bar:
                        bar.update()
                done += 1
            rc = p.wait()
            feeder.join()
            if done < len(todo):
                i, k = todo[done]
                h = hs[i]
                with lock:
                    results[todo[done]] = {
                        "group": h.group_name, "name": h.fullname, "kind": k,
                        "dtype": None if h.dtype is None else _dtype_name(h.dtype),
                        "status": "crash", "detail": f"the process died (exit {rc})"}
                    if bar:
                        bar.update()
                done += 1
            todo = todo[done:]

    shares = [jobs[k::n_procs] for k in range(max(1, n_procs))]
    threads = [threading.Thread(target=shard, args=(sh,)) for sh in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bar:
        bar.close()
    return [results[j] for j in jobs]


def sample(hs, per_group: int):
    """A deterministic sample: up to ``per_group`` harnesses of each group, chosen by a hash
    of their names (stable across runs and machines)."""
    by_group = collections.defaultdict(list)
    for i, h in enumerate(hs):
        if not_applicable(h) is None:
            by_group[h.group_name].append(i)
    out = []
    for g in sorted(by_group):
        idx = sorted(by_group[g], key=lambda i: zlib.crc32(hs[i].fullname.encode()))
        out.extend(idx[:per_group])
    return sorted(out)


def _na_reason(detail):
    for key in ("dtype", "JAX does not implement", "JAX rejects", "an input is",
                "an output is", "an input or output is", "no float32 input",
                "no float32 output", "gradients are checked"):
        if detail.startswith(key):
            if key.startswith("an "):
                return detail  # which dtype, e.g. "an input or output is uint32"
            return {"gradients are checked": "not float32"}.get(key, key)
    return detail[:40]


def render_table(results) -> str:
    """The per-group markdown table of a full run."""
    groups = collections.defaultdict(lambda: {"fwd": collections.Counter(),
                                              "grad": collections.Counter(), "why": {},
                                              "na": collections.Counter()})
    hs = {h.fullname: h for h in harnesses()}
    for r in results:
        g = groups[r["group"]]
        g[r["kind"]][r["status"]] += 1
        if r["status"] == "n/a":
            g["na"][_na_reason(r["detail"])] += 1
        elif r["status"] == "unsupported":
            why = (unsupported_reason(hs[r["name"]], r["kind"], r["detail"])
                   or f"unlisted: {r['detail'][:100]}")
            g["why"][why] = g["why"].get(why, 0) + 1
        elif r["status"] == "wrong" and r["name"] in KNOWN_WRONG:
            why = f"wrong, a known Core ML limit: {KNOWN_WRONG[r['name']]}"
            g["why"][why] = g["why"].get(why, 0) + 1
        elif r["status"] in ("wrong", "crash", "valid-diff"):
            why = f"{r['status']}: {r['detail'][:80]}"
            if r["status"] == "valid-diff":
                why = f"valid difference: {r['detail'].split(' (vs JAX')[0]}"
            g["why"][why] = g["why"].get(why, 0) + 1

    def cell(c):
        app = sum(v for k, v in c.items() if k != "n/a")
        return f"{c['pass'] + c['valid-diff']}/{app}" if app else "n/a"

    rows = ["| group | forward pass | gradient pass | not passing, and why | not applicable |",
            "|---|---|---|---|---|"]
    for name in sorted(groups):
        g = groups[name]
        why = "; ".join(f"{n}× {w}" for w, n in sorted(g["why"].items(), key=lambda x: -x[1]))
        na = ", ".join(f"{n}× {w}" for w, n in sorted(g["na"].items(), key=lambda x: -x[1]))
        rows.append(f"| `{name}` | {cell(g['fwd'])} | {cell(g['grad'])} | "
                    f"{why.replace('|', '/')} | {na.replace('|', '/')} |")
    return "\n".join(rows)


DOC = os.path.join(ROOT, "docs", "primitives.md")
BEGIN = "<!-- conformance: generated by tools/conformance.py --write -->"
END = "<!-- conformance: end -->"


def summary_lines(summary) -> list[str]:
    def line(kind, c):
        return (f"- {kind}: {c.get('pass', 0) + c.get('valid-diff', 0)} / {c['applicable']} "
                f"pass ({100 * (c['pass_rate'] or 0):.1f} %), {c.get('wrong', 0)} wrong, "
                f"{c.get('crash', 0)} crash, {c.get('unsupported', 0)} unsupported, "
                f"{c.get('n/a', 0)} not applicable")
    return [line("forward", summary["fwd"]), line("gradient", summary["grad"])]


def doc_section(results, summary, jax_version) -> str:
    return "\n".join([
        BEGIN,
        "## JAX's own primitive harnesses",
        "",
        f"Every harness of `jax._src.internal_test_util.test_harnesses.all_harnesses` (jax "
        f"{jax_version}) run through rlxjax against `jax.jit` (forward) and `jax.grad` (a "
        "weighted sum of the float32 outputs, on float32 harnesses), on the reference backend "
        "with the program validated by coremltools' MIL loader. Reproduce with "
        "`python tools/conformance.py --write` (about 5 minutes on 2 cores); "
        "`tests/repo/test_conformance.py` runs a sample of each group by default and all of them "
        "with `-m slow`. How results are compared, and what *not applicable* means, is in "
        "the tool's docstring.",
        "",
        *summary_lines(summary),
        "",
        render_table(results),
        END,
    ])


def write_doc(results, summary, jax_version) -> None:
    from rlxjax.atomic import write_bytes  # noqa: PLC0415
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    section = doc_section(results, summary, jax_version)
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    write_bytes(DOC, text.encode())


def summarize(results):
    out = {}
    for kind in ("fwd", "grad"):
        c = collections.Counter(r["status"] for r in results if r["kind"] == kind)
        applicable = sum(v for k, v in c.items() if k != "n/a")
        passed = c["pass"] + c["valid-diff"]
        out[kind] = dict(c, applicable=applicable,
                         pass_rate=round(passed / applicable, 4) if applicable else None)
    return out


def main(argv=None):
    global FORMAT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", action="append", help="only these harness groups")
    ap.add_argument("--name", help="only harnesses whose name contains this")
    ap.add_argument("--sample", type=int, help="a deterministic sample of N per group")
    ap.add_argument("--kind", choices=("fwd", "grad", "both"), default="both")
    ap.add_argument("--skip-json", action="append", default=[], metavar="JSON",
                    help="skip the harnesses whose results this --json file of an earlier "
                         "run holds (to finish a long run in parts)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--write", action="store_true",
                    help="write the table into docs/primitives.md")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--show", default="wrong,crash",
                    help="statuses to list one by one (comma-separated)")
    ap.add_argument("--format", choices=("mlpackage", "aimodel"), default=FORMAT,
                    help="compile to Core ML (run on the reference backend) or Core AI "
                         "(run on its runtime)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    FORMAT = os.environ["RLXJAX_CONFORMANCE_FORMAT"] = a.format
    if a.worker:
        _worker()
        return 0

    hs = harnesses()
    idx = sample(hs, a.sample) if a.sample else range(len(hs))
    idx = [i for i in idx if (not a.group or hs[i].group_name in a.group)
           and (not a.name or a.name in hs[i].fullname)]
    done = set()
    for path in a.skip_json:
        with open(path, encoding="utf-8") as f:
            done |= {r["name"] for r in json.load(f)["results"]}
    idx = [i for i in idx if hs[i].fullname not in done]
    kinds = ("fwd", "grad") if a.kind == "both" else (a.kind,)
    jobs = [(i, k) for i in idx for k in kinds]
    results = run_jobs(jobs, a.jobs)
    show = set(a.show.split(","))
    for r in results:
        if r["status"] in show:
            print(f"{r['status']:11s} {r['kind']:4s} {r['name']}: {r['detail']}")
    summary = summarize(results)
    import jax
    print(f"jax {jax.__version__}, {len(idx)} harnesses" + (f" ({a.sample} per group)" if a.sample else ""))
    print("\n".join(summary_lines(summary)))
    if a.json:
        from rlxjax.atomic import write_bytes  # noqa: PLC0415
        payload = {"jax": jax.__version__, "summary": summary, "results": results}
        write_bytes(a.json, (json.dumps(payload, indent=0, sort_keys=True) + "\n").encode())
    if a.write:
        if (a.sample or a.group or a.name or a.skip_json or a.kind != "both"
                or a.format != "mlpackage"):
            ap.error("--write needs the full Core ML run (no --sample/--group/--name/"
                     "--skip-json/--kind/--format)")
        write_doc(results, summary, jax.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
