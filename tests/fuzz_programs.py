"""Random well-typed JAX programs for tests/frontend/test_fuzz.py (interpreter:
tests/fuzz_interp.py).

A program is plain data: a list of input specs and a list of *steps*. Each step is
``(op, operand_indices, params)`` and appends one value to a pool that starts with the
inputs; a ``("jit", operand_indices, {"body": [steps], "remat": bool})`` step runs a sub-program
inside ``jax.jit`` (or ``jax.checkpoint``) (nesting). :func:`run` interprets a program with ``jax.numpy`` at trace time, so
the same program is a JAX function that rlxjax can compile, ``jax.jit`` can run in float32,
and -- with ``ft=jnp.float64`` under ``jax.enable_x64`` -- a float64 reference.

The generator (:func:`programs`) tracks an abstract value per pool entry -- shape, kind
(``f`` float / ``i`` int32 / ``b`` bool), a magnitude bound and an *exact* flag -- and only
draws ops whose result is meaningful to compare:

* magnitudes stay below ``MAX_BOUND`` (``exp`` only of small values, products of bounded
  factors), so fp32 rounding errors stay relative to values of moderate size;
* domains are kept away from singularities by construction: ``log(|x| + 0.5)``,
  ``x / (|y| + 0.5)``, ``sqrt(|x| + 0.5)``, ``(|x| + 0.5) ** y`` -- never ``log(x)`` of a value
  that could be ~0, whose gradient would be unbounded;
* discontinuous ops (comparisons, floor/ceil/sign/round, argmax, float->int casts, integer
  division) only see *exact* values: the inputs and what exact ops (negation, abs, max,
  select, reshapes, multiplication by powers of two, integer arithmetic) make of them. Every
  evaluation computes those bit-identically, so a comparison cannot flip between JAX and
  rlxjax on a rounding difference -- a flip is a real bug;
* integer arithmetic stays far from int32 overflow (bounded too).

Values are at most rank 4 and 256 elements; inputs are drawn from a seed (continuous
uniform values in [-2, 2], ints in [-6, 6], random bools), not from hypothesis, so that ties
are structural (``max(a, a)``) rather than artefacts of hypothesis' favourite numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from fuzz_interp import OPS, Program

MAX_BOUND = 1e3
MAX_SIZE = 256
MAX_RANK = 4
DIMS = (1, 2, 3, 4, 6)


@dataclass(frozen=True)
class Val:
    shape: tuple
    kind: str          # "f" float, "i" int32, "b" bool
    bound: float       # |value| <= bound (floats and ints)
    exact: bool        # computed bit-identically by every correct evaluation


# -- the generator -------------------------------------------------------------------------
_KIND_DT = {"f": jnp.float32, "i": jnp.int32, "b": jnp.bool_}


def _kind_of(dtype):
    dtype = np.dtype(dtype)
    return {"f": "f", "i": "i", "b": "b"}[dtype.kind]


def _abstract_out(name, vals, params):
    """Shape and kind of one step's result, by jax.eval_shape of the interpreter."""
    specs = [jax.ShapeDtypeStruct(v.shape, _KIND_DT[v.kind]) for v in vals]
    out = jax.eval_shape(lambda *a: OPS[name](jnp.float32, *a, **params), *specs)
    return tuple(out.shape), _kind_of(out.dtype)


def _bcast(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


UNARY_F = {  # name -> (bound function, exact-preserving, needs exact input)
    "neg": (lambda b: b, True, False), "abs": (lambda b: b, True, False),
    "sin": (lambda b: 1.0, False, False), "cos": (lambda b: 1.0, False, False),
    "tanh": (lambda b: 1.0, False, False), "sigmoid": (lambda b: 1.0, False, False),
    "exp": (lambda b: math.exp(b) if b < 50 else math.inf, False, False),
    "square": (lambda b: b * b, False, False), "cube": (lambda b: b ** 3, False, False),
    "relu": (lambda b: b, True, False), "softplus": (lambda b: b + 1.0, False, False),
    "gelu": (lambda b: b + 1.0, False, False), "erf": (lambda b: 1.0, False, False),
    "log_pos": (lambda b: max(1.0, math.log(b + 0.5)), False, False),
    "sqrt_pos": (lambda b: math.sqrt(b + 0.5), False, False),
    "rsqrt_pos": (lambda b: 1.5, False, False), "log1p_pos": (lambda b: math.log1p(b), False, False),
    "erfc": (lambda b: 2.0, False, False),
    "expm1": (lambda b: math.exp(b) if b < 50 else math.inf, False, False),
    "clip": (lambda b: min(b, 1.0), True, False), "ipow_neg": (lambda b: 4.0, False, False),
    "scale4": (lambda b: 4 * b, True, False), "half": (lambda b: b / 2, False, False),
    "floor": (lambda b: b + 1, True, True), "ceil": (lambda b: b + 1, True, True),
    "sign": (lambda b: 1.0, True, True), "round": (lambda b: b + 1, True, True),
}
BINARY_F = {
    "add": (lambda a, b: a + b, False), "sub": (lambda a, b: a + b, False),
    "mul": (lambda a, b: a * b, False), "max": (max, True), "min": (max, True),
    "div_pos": (lambda a, b: 2 * a, False),
    "pow_pos": (lambda a, b: max((a + 0.5) ** b, 2.0 ** b), False),
}
BINARY_I = {"iadd": lambda a, b: a + b, "isub": lambda a, b: a + b, "imul": lambda a, b: a * b,
            "imax": max, "imin": max, "ifloordiv": lambda a, b: a, "irem": lambda a, b: b + 1,
            "itruncdiv": lambda a, b: a}


class _Gen:
    def __init__(self, draw, pool, loops=False):
        self.draw = draw
        self.pool = pool          # list of Val
        self.loops = loops        # may draw 'loop_draw' (forward programs, random='inputs')

    def pick(self, pred=lambda v: True):
        ids = [i for i, v in enumerate(self.pool) if pred(v)]
        return self.draw(st.sampled_from(ids)) if ids else None

    def seed(self):
        return self.draw(st.integers(0, 2**20))

    def add(self, steps, name, ids, params, bound, exact):
        vals = [self.pool[i] for i in ids]
        try:
            shape, kind = _abstract_out(name, vals, params)
        except (TypeError, ValueError):  # a draw JAX itself rejects: not a program
            return False
        if _size(shape) > MAX_SIZE or len(shape) > MAX_RANK:
            return False
        if kind == "b":
            bound = 1.0
        if not (bound <= MAX_BOUND):
            return False
        steps.append((name, list(ids), params))
        self.pool.append(Val(shape, kind, float(bound), bool(exact)))
        return True

    # one step ---------------------------------------------------------------------------
    def step(self, steps, depth):
        family = self.draw(st.sampled_from(
            ["unary", "binary", "binary", "int", "compare", "where", "cast", "reduce",
             "shape", "shape", "dot", "norm", "jit" if depth < 2 else "unary"]
            + (["loop"] if self.loops else [])))
        return getattr(self, "g_" + family)(steps, depth)

    def g_loop(self, steps, depth):
        """A bounded while_loop drawing random bits from a constant key (fuzz_interp.py
        'loop_draw'): compiled with random='inputs', the draws are JAX's own."""
        i = self.pick(lambda v: v.kind == "f")
        if i is None:
            return False
        return self.add(steps, "loop_draw", [i], {"seed": self.seed(),
                                                   "steps": self.draw(st.integers(0, 3))},
                        self.pool[i].bound + 2.0, False)

    def g_unary(self, steps, depth):
        i = self.pick(lambda v: v.kind == "f")
        if i is None:
            return False
        v = self.pool[i]
        names = [n for n, (_, _, ex) in UNARY_F.items() if v.exact or not ex]
        name = self.draw(st.sampled_from(names))
        bf, keeps, _ = UNARY_F[name]
        if name == "half":  # x/2 is exact unless it underflows: our inputs are far from that
            keeps = True
        return self.add(steps, name, [i], {}, bf(v.bound), v.exact and keeps)

    def g_binary(self, steps, depth):
        i = self.pick(lambda v: v.kind == "f")
        if i is None:
            return False
        a = self.pool[i]
        j = self.pick(lambda v: v.kind == "f" and _bcast(v.shape, a.shape) is not None)
        b = self.pool[j]
        name = self.draw(st.sampled_from(sorted(BINARY_F)))
        bf, keeps = BINARY_F[name]
        if name == "pow_pos" and b.bound > 4:
            name, bf, keeps = "mul", *BINARY_F["mul"]
        ids = [i, j] if self.draw(st.booleans()) else [j, i]
        return self.add(steps, name, ids, {}, bf(a.bound, b.bound), a.exact and b.exact and keeps)

    def g_int(self, steps, depth):
        i = self.pick(lambda v: v.kind == "i")
        if i is None:
            return self.g_cast(steps, depth)
        a = self.pool[i]
        if self.draw(st.booleans()):
            name = self.draw(st.sampled_from(["ineg", "iabs"]))
            return self.add(steps, name, [i], {}, a.bound, True)
        j = self.pick(lambda v: v.kind == "i" and _bcast(v.shape, a.shape) is not None)
        name = self.draw(st.sampled_from(sorted(BINARY_I)))
        return self.add(steps, name, [i, j], {}, BINARY_I[name](a.bound, self.pool[j].bound),
                        True)

    def g_compare(self, steps, depth):
        i = self.pick(lambda v: v.exact or v.kind == "b")
        if i is None:
            return False
        a = self.pool[i]
        if a.kind == "b":
            j = self.pick(lambda v: v.kind == "b" and _bcast(v.shape, a.shape) is not None)
            if self.draw(st.booleans()):
                return self.add(steps, "not", [i], {}, 1, True)
            name = self.draw(st.sampled_from(["and", "or", "xor", "eq", "ne", "lt"]))
        else:
            j = self.pick(lambda v: v.exact and v.kind == a.kind
                          and _bcast(v.shape, a.shape) is not None)
            name = self.draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
        return self.add(steps, name, [i, j], {}, 1, True)

    def g_where(self, steps, depth):
        if self.draw(st.integers(0, 3)) == 0:  # lax.select_n on an int32 case index
            w = self.pick(lambda v: v.kind == "i")
            if w is not None:
                wshape = self.pool[w].shape
                a = self.pick(lambda v: v.kind != "b" and v.shape == wshape)
                if a is not None:
                    same = [k for k, v in enumerate(self.pool)
                            if v.kind == self.pool[a].kind and v.shape == wshape]
                    b, c = self.draw(st.sampled_from(same)), self.draw(st.sampled_from(same))
                    vals = [self.pool[k] for k in (a, b, c)]
                    return self.add(steps, "select_n", [w, a, b, c], {},
                                    max(v.bound for v in vals), all(v.exact for v in vals))
        if self.draw(st.integers(0, 7)) == 0:
            f = self.pick(lambda v: v.kind == "f")
            if f is not None:
                return self.add(steps, "isfinite", [f], {}, 1, True)
        c = self.pick(lambda v: v.kind == "b")
        if c is None:
            return self.g_compare(steps, depth)
        cv = self.pool[c]
        i = self.pick(lambda v: v.kind != "b" and _bcast(v.shape, cv.shape) is not None)
        if i is None:
            return False
        a = self.pool[i]
        full = _bcast(a.shape, cv.shape)
        j = self.pick(lambda v: v.kind == a.kind and _bcast(v.shape, full) is not None)
        b = self.pool[j]
        return self.add(steps, "where", [c, i, j], {}, max(a.bound, b.bound),
                        a.exact and b.exact)

    def g_cast(self, steps, depth):
        i = self.pick()
        v = self.pool[i]
        targets = {"f": ["to_i", "to_b"] if v.exact else [], "i": ["to_f", "to_b"],
                   "b": ["to_f", "to_i"]}[v.kind]
        if not targets:
            return False
        name = self.draw(st.sampled_from(targets))
        bound = v.bound + 1
        return self.add(steps, name, [i], {}, bound, True)

    def _axes(self, rank, min_size=0):
        return tuple(sorted(self.draw(st.sets(st.integers(0, rank - 1), min_size=min_size,
                                              max_size=rank)))) if rank else ()

    def g_reduce(self, steps, depth):
        i = self.pick(lambda v: len(v.shape) > 0)
        if i is None:
            return False
        v = self.pool[i]
        rank = len(v.shape)
        if self.draw(st.integers(0, 5)) == 0 and (v.exact or v.kind == "b") and v.kind != "b":
            axis = self.draw(st.integers(0, rank - 1))
            fn = self.draw(st.sampled_from(["argmax", "argmin"]))
            return self.add(steps, "argmax", [i], {"fn": fn, "axis": axis,
                                                   "keepdims": self.draw(st.booleans())},
                            v.shape[axis], True)
        axes = self._axes(rank, 1)
        n = _size([v.shape[a] for a in axes])
        fns = {"f": ["sum", "max", "min", "mean", "prod"], "i": ["sum", "max", "min"],
               "b": ["any", "all", "max", "min"]}[v.kind]
        fn = self.draw(st.sampled_from(fns))
        bound = {"sum": n * v.bound, "prod": v.bound ** n if v.bound > 1 else 1.0}.get(fn, v.bound)
        exact = v.exact and fn in ("max", "min") or v.kind != "f"
        if fn == "prod" and n > 8:
            return False
        return self.add(steps, "reduce", [i], {"fn": fn, "axes": axes,
                                               "keepdims": self.draw(st.booleans())},
                        bound, exact)

    def g_shape(self, steps, depth):
        i = self.pick()
        v = self.pool[i]
        rank, shape = len(v.shape), v.shape
        kinds = ["reshape", "broadcast", "expand", "concat", "pad"]
        if rank:
            kinds += ["transpose", "slice", "rev", "cumsum", "take", "sort", "scatter_add",
                      "dyn_slice"]
        if 1 in shape:
            kinds.append("squeeze")
        name = self.draw(st.sampled_from(kinds))
        keep = (v.bound, v.exact)
        if name == "reshape":
            dims = self.draw(st.lists(st.sampled_from(DIMS), max_size=MAX_RANK))
            n = _size(shape)
            new = _factor(n, dims)
            return self.add(steps, name, [i], {"shape": new}, *keep)
        if name == "broadcast":
            lead = tuple(self.draw(st.lists(st.sampled_from(DIMS), max_size=2)))
            tail = tuple(self.draw(st.sampled_from(DIMS)) if d == 1 and self.draw(st.booleans())
                         else d for d in shape)
            return self.add(steps, name, [i], {"shape": lead + tail}, *keep)
        if name == "expand":
            return self.add(steps, name, [i], {"axis": self.draw(st.integers(0, rank))}, *keep)
        if name == "squeeze":
            ones = [a for a, d in enumerate(shape) if d == 1]
            axes = tuple(sorted(self.draw(st.sets(st.sampled_from(ones), min_size=1))))
            return self.add(steps, name, [i], {"axes": axes}, *keep)
        if name == "transpose":
            perm = tuple(self.draw(st.permutations(range(rank))))
            return self.add(steps, name, [i], {"perm": perm}, *keep)
        if name == "slice":
            start, limit, strides = [], [], []
            for d in shape:
                s = self.draw(st.integers(0, d - 1))
                e = self.draw(st.integers(s + 1, d))
                start.append(s), limit.append(e), strides.append(self.draw(st.integers(1, 3)))
            return self.add(steps, name, [i], {"start": tuple(start), "limit": tuple(limit),
                                               "strides": tuple(strides)}, *keep)
        if name == "rev":
            return self.add(steps, name, [i], {"axes": self._axes(rank)}, *keep)
        if name == "pad":
            if not rank or v.kind == "b":
                return False
            cfg = tuple((self.draw(st.integers(-1 if d > 1 else 0, 2)),
                         self.draw(st.integers(0, 2)), self.draw(st.integers(0, 1)))
                        for d in shape)
            return self.add(steps, name, [i], {"cfg": cfg}, *keep)
        if name == "cumsum":
            if v.kind == "b":
                return False
            axis = self.draw(st.integers(0, rank - 1))
            pick = self.draw(st.sampled_from(["cumsum", "cumsum", "cummax", "cummin", "cumprod"]))
            if pick in ("cummax", "cummin"):
                return self.add(steps, pick, [i], {"axis": axis}, *keep)
            if pick == "cumprod":
                if shape[axis] > 6:
                    return False
                return self.add(steps, pick, [i], {"axis": axis},
                                max(1.0, v.bound) ** shape[axis], v.exact and v.kind == "i")
            return self.add(steps, name, [i], {"axis": axis, "reverse": self.draw(st.booleans())},
                            v.bound * shape[axis], v.exact and v.kind == "i")
        if name == "sort":
            if v.kind == "b":
                return False
            if self.draw(st.booleans()):
                k = self.draw(st.integers(1, shape[-1]))
                which = self.draw(st.sampled_from([0, 1]))
                return self.add(steps, "top_k", [i], {"k": k, "which": which},
                                v.bound if which == 0 else shape[-1], v.exact or which == 0)
            return self.add(steps, "sort", [i], {"axis": self.draw(st.integers(0, rank - 1))},
                            *keep)
        if name == "scatter_add":
            # x.at[idx].add(y): idx an int value (out-of-range entries are dropped)
            if v.kind == "b":
                return False
            j = self.pick(lambda u: u.kind == "i" and len(u.shape) <= 2)
            if j is None:
                return False
            upd = self.pool[j].shape + shape[1:]
            y = self.pick(lambda u: u.kind == v.kind and _bcast(u.shape, upd) == upd)
            if y is None:
                return False
            n = _size(self.pool[j].shape)
            return self.add(steps, name, [i, j, y], {}, v.bound + n * self.pool[y].bound,
                            v.exact and v.kind == "i")
        if name == "dyn_slice":
            j = self.pick(lambda u: u.kind == "i" and u.shape == ())
            if j is None:
                return False
            axis = self.draw(st.integers(0, rank - 1))
            size = self.draw(st.integers(1, shape[axis]))
            return self.add(steps, name, [i, j], {"axis": axis, "size": size}, *keep)
        if name == "take":
            j = self.pick(lambda u: u.kind == "i" and len(u.shape) + rank - 1 <= MAX_RANK)
            if j is None:
                return False
            return self.add(steps, name, [i, j], {"axis": self.draw(st.integers(0, rank - 1))},
                            *keep)
        # concat: a partner of the same shape except along the axis (often v itself)
        if not rank:
            return False
        axis = self.draw(st.integers(0, rank - 1))
        j = self.pick(lambda u: u.kind == v.kind and len(u.shape) == rank and all(
            a == b for k, (a, b) in enumerate(zip(u.shape, shape)) if k != axis))
        u = self.pool[j]
        return self.add(steps, name, [i, j], {"axis": axis}, max(v.bound, u.bound),
                        v.exact and u.exact)

    def g_dot(self, steps, depth):
        i = self.pick(lambda v: v.kind == "f" and len(v.shape) > 0)
        if i is None:
            return False
        a = self.pool[i]
        if self.draw(st.booleans()):
            m = self.draw(st.sampled_from(DIMS))
            return self.add(steps, "matmul_const", [i], {"seed": self.seed(), "m": m},
                            a.bound * a.shape[-1], False)
        ax_a = self.draw(st.integers(0, len(a.shape) - 1))
        k = a.shape[ax_a]
        j = self.pick(lambda v: v.kind == "f" and k in v.shape)
        b = self.pool[j]
        ax_b = self.draw(st.sampled_from([t for t, d in enumerate(b.shape) if d == k]))
        return self.add(steps, "tensordot", [i, j], {"ax": ((ax_a,), (ax_b,))},
                        a.bound * b.bound * k, False)

    def g_norm(self, steps, depth):
        i = self.pick(lambda v: v.kind == "f" and len(v.shape) > 0)
        if i is None:
            return False
        v = self.pool[i]
        shape, rank = v.shape, len(v.shape)
        eps = self.draw(st.sampled_from([1e-5, 1e-3, 0.1]))
        kinds = ["layer", "rms", "batch", "batch_train", "ada", "gated", "softmax", "lse"]
        if rank >= 2:
            kinds.append("group")
        if rank >= 3:
            kinds.append("ln2d")
        kind = self.draw(st.sampled_from(kinds))
        seed = self.seed()
        # affine norms: |y| <= sqrt(n) * |gamma| + |beta| with gamma <= 1.5, beta <= 1
        nb = 1.5 * math.sqrt(_size(shape)) + 1.0
        if kind in ("layer", "rms"):
            axis = self.draw(st.integers(0, rank - 1))
            return self.add(steps, "layer_norm", [i], {
                "axis": axis, "eps": eps, "seed": seed, "g": self.draw(st.booleans()),
                "b": self.draw(st.booleans()), "rms": kind == "rms"}, nb, False)
        if kind == "group":
            ca = self.draw(st.sampled_from([1, rank - 1]))
            c = shape[ca]
            groups = self.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
            return self.add(steps, "group_norm", [i], {"groups": groups, "eps": eps,
                                                       "seed": seed, "channel_axis": ca}, nb, False)
        if kind == "ln2d":
            return self.add(steps, "layer_norm2d", [i], {"eps": eps, "seed": seed}, nb, False)
        if kind in ("batch", "batch_train"):
            axis = self.draw(st.integers(0, rank - 1))
            if kind == "batch":
                return self.add(steps, "batch_norm", [i], {"axis": axis, "eps": eps,
                                                           "seed": seed},
                                (v.bound + 1) * 1.5 / math.sqrt(0.2) + 1, False)
            which = self.draw(st.sampled_from([0, 0, 1, 2]))
            return self.add(steps, "batch_norm_train", [i], {
                "axis": axis, "eps": eps, "seed": seed, "which": which},
                nb if which == 0 else v.bound * v.bound + 2, False)
        if kind in ("softmax", "lse"):
            axis = self.draw(st.integers(0, rank - 1))
            name = "softmax" if kind == "softmax" else "logsumexp"
            return self.add(steps, name, [i], {"axis": axis},
                            1.0 if kind == "softmax" else v.bound + math.log(shape[axis]), False)
        full = lambda u: u.kind == "f" and _bcast(u.shape, shape) == shape  # noqa: E731
        if kind == "gated":
            j = self.pick(lambda u: u.kind == "f" and u.shape == shape)
            g = self.pick(full)
            return self.add(steps, "gated_residual", [i, j, g], {},
                            v.bound + self.pool[j].bound * self.pool[g].bound, False)
        s, h = self.pick(full), self.pick(full)
        ak = self.draw(st.sampled_from(["layer", "rms"]))
        return self.add(steps, "ada_layer_norm", [i, s, h], {"kind": ak, "eps": eps},
                        math.sqrt(shape[-1]) * (1 + self.pool[s].bound) + self.pool[h].bound,
                        False)

    def g_jit(self, steps, depth):
        body = []
        n = self.draw(st.integers(1, 3))
        start = len(self.pool)
        for _ in range(n):
            self.step(body, depth + 1)
        if not body:
            return False
        # the body's values are already in self.pool (appended by add); record the call
        steps.append(("jit", [], {"body": body, "remat": self.draw(st.integers(0, 3)) == 0}))
        # pool bookkeeping: a jit step yields len(body-results) values; the interpreter
        # appends exactly the values the body appended, in order.
        assert len(self.pool) - start == _count(body)
        return True


def _count(steps):
    return sum(_count(p["body"]) if n == "jit" else 1 for n, _, p in steps)


def _factor(n, dims):
    """A shape of ``n`` elements using divisors drawn in ``dims`` where they fit."""
    out = []
    for d in dims:
        if n % d == 0 and len(out) < MAX_RANK - 1:
            out.append(d)
            n //= d
    out.append(n)
    return tuple(out)


@st.composite
def programs(draw, max_steps=10, loops=False):
    n_in = draw(st.integers(1, 3))
    inputs = []
    for k in range(n_in):
        rank = draw(st.integers(0, 3))
        shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
        kind = "f" if k == 0 else draw(st.sampled_from(["f", "f", "f", "i", "b"]))
        inputs.append((shape, kind))
    pool = [Val(s, k, {"f": 2.0, "i": 6.0, "b": 1.0}[k], True) for s, k in inputs]
    gen = _Gen(draw, pool, loops)
    steps = []
    n = draw(st.integers(1, max_steps))
    for _ in range(n):
        gen.step(steps, 0)
    total = len(pool)
    last = total - 1
    extra = draw(st.lists(st.integers(0, total - 1), max_size=2))
    outputs = sorted({last, *extra})
    return Program(inputs, steps, outputs, draw(st.integers(0, 2**31 - 1))), pool
