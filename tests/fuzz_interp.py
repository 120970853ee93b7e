"""The interpreter half of the fuzzer (tests/fuzz_programs.py has the generator).

A program is plain data: a list of input specs and a list of *steps*. Each step is
``(op, operand_indices, params)`` and appends one value to a pool that starts with the
inputs; a ``("jit", [], {"body": [steps], "remat": bool})`` step runs a sub-program inside
``jax.jit`` (or ``jax.checkpoint``) and appends every value it computed. :func:`run`
interprets a program with ``jax.numpy`` at trace time, so the same program is a JAX
function that rlxjax can compile, ``jax.jit`` can run in float32, and -- with
``ft=jnp.float64`` under ``jax.enable_x64`` -- a float64 reference. Constants (norm
affines, matmul weights) are float32 values derived from seeds, identical in both runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import rlxjax.nn as rnn


@dataclass
class Program:
    inputs: list       # [(shape, kind)]
    steps: list        # [(op, operand indices, params)]
    outputs: list      # pool indices returned
    seed: int

    def __repr__(self):
        lines = [f"Program(seed={self.seed}, inputs={self.inputs}, outputs={self.outputs})"]
        _fmt_steps(self.steps, len(self.inputs), lines, "  ")
        return "\n".join(lines)


def _fmt_steps(steps, start, lines, ind):
    for k, (op, ids, params) in enumerate(steps):
        if op == "jit":
            lines.append(f"{ind}v{start + k} = jit(...) of pool -> body:")
            _fmt_steps(params["body"], start + k, lines, ind + "    ")
        else:
            shown = {k2: v for k2, v in params.items() if k2 != "body"}
            lines.append(f"{ind}v{start + k} = {op}({', '.join(f'v{i}' for i in ids)}) {shown}")


# -- the interpreter -----------------------------------------------------------------------
def _const(seed, shape, lo=-1.0, hi=1.0):
    """A float32 constant (identical in the float32 and float64 runs)."""
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def _cf(ft, seed, shape, lo=-1.0, hi=1.0):
    return jnp.asarray(_const(seed, shape, lo, hi)).astype(ft)


def _i32(x):
    return x.astype(jnp.int32)


OPS = {}


def op(name):
    def deco(fn):
        OPS[name] = fn
        return fn
    return deco


# elementwise unary (floats)
for _n, _f in {
    "neg": jnp.negative, "abs": jnp.abs, "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid, "exp": jnp.exp, "square": jnp.square,
    "cube": lambda x: x ** 3, "relu": jax.nn.relu, "softplus": jax.nn.softplus,
    "gelu": lambda x: jax.nn.gelu(x, approximate=True), "erf": jax.scipy.special.erf,
    "log_pos": lambda x: jnp.log(jnp.abs(x) + 0.5), "sqrt_pos": lambda x: jnp.sqrt(jnp.abs(x) + 0.5),
    "rsqrt_pos": lambda x: lax.rsqrt(jnp.abs(x) + 0.5), "log1p_pos": lambda x: jnp.log1p(jnp.abs(x)),
    "scale4": lambda x: x * 4.0, "half": lambda x: x * 0.5,
    "floor": jnp.floor, "ceil": jnp.ceil, "sign": jnp.sign, "round": jnp.round,
    "erfc": jax.scipy.special.erfc, "expm1": jnp.expm1, "clip": lambda x: jnp.clip(x, -1.0, 1.0),
    "ipow_neg": lambda x: lax.integer_pow(jnp.abs(x) + 0.5, -2),
}.items():
    OPS[_n] = (lambda f: lambda ft, x: f(x).astype(ft))(_f)

# elementwise binary with broadcasting; kind-generic where JAX is
for _n, _f in {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
    "min": jnp.minimum, "div_pos": lambda x, y: x / (jnp.abs(y) + 0.5),
    "pow_pos": lambda x, y: (jnp.abs(x) + 0.5) ** y,
}.items():
    OPS[_n] = (lambda f: lambda ft, x, y: f(x, y).astype(ft))(_f)

for _n, _f in {"iadd": jnp.add, "isub": jnp.subtract, "imul": jnp.multiply, "imax": jnp.maximum,
               "imin": jnp.minimum, "ineg": lambda x: -x, "iabs": jnp.abs,
               "ifloordiv": lambda x, y: x // (jnp.abs(y) + 1),
               "irem": lambda x, y: x % (jnp.abs(y) + 1),
               "itruncdiv": lambda x, y: lax.div(x, jnp.abs(y) + 1)}.items():
    OPS[_n] = (lambda f: lambda ft, *a: _i32(f(*a)))(_f)

for _n, _f in {"lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal,
               "eq": jnp.equal, "ne": jnp.not_equal, "and": jnp.logical_and,
               "or": jnp.logical_or, "xor": jnp.logical_xor}.items():
    OPS[_n] = (lambda f: lambda ft, x, y: f(x, y))(_f)
OPS["not"] = lambda ft, x: jnp.logical_not(x)
OPS["where"] = lambda ft, c, x, y: jnp.where(c, x, y)
OPS["to_f"] = lambda ft, x: x.astype(ft)
OPS["to_i"] = lambda ft, x: _i32(x)
OPS["to_b"] = lambda ft, x: x.astype(bool)


@op("reduce")
def _reduce(ft, x, *, fn, axes, keepdims):
    kind_out = x.dtype
    f = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean,
         "prod": jnp.prod, "any": jnp.any, "all": jnp.all}[fn]
    r = f(x, axis=axes, keepdims=keepdims)
    return r.astype(kind_out) if fn not in ("any", "all") else r


@op("argmax")
def _argmax(ft, x, *, fn, axis, keepdims):
    return _i32((jnp.argmax if fn == "argmax" else jnp.argmin)(x, axis=axis, keepdims=keepdims))


OPS["reshape"] = lambda ft, x, *, shape: jnp.reshape(x, shape)
OPS["transpose"] = lambda ft, x, *, perm: jnp.transpose(x, perm)
OPS["slice"] = lambda ft, x, *, start, limit, strides: lax.slice(x, start, limit, strides)
OPS["rev"] = lambda ft, x, *, axes: lax.rev(x, axes)
OPS["concat"] = lambda ft, x, y, *, axis: jnp.concatenate([x, y], axis=axis)
OPS["broadcast"] = lambda ft, x, *, shape: jnp.broadcast_to(x, shape)
OPS["expand"] = lambda ft, x, *, axis: jnp.expand_dims(x, axis)
OPS["squeeze"] = lambda ft, x, *, axes: jnp.squeeze(x, axes)
OPS["pad"] = lambda ft, x, *, cfg: lax.pad(x, jnp.zeros((), x.dtype), cfg)
OPS["cumsum"] = lambda ft, x, *, axis, reverse: lax.cumsum(x, axis, reverse=reverse)
OPS["cummax"] = lambda ft, x, *, axis: lax.cummax(x, axis)
OPS["cummin"] = lambda ft, x, *, axis: lax.cummin(x, axis)
OPS["cumprod"] = lambda ft, x, *, axis: lax.cumprod(x, axis)
OPS["sort"] = lambda ft, x, *, axis: jnp.sort(x, axis=axis)
OPS["top_k"] = lambda ft, x, *, k, which: lax.top_k(x, k)[which]
OPS["scatter_add"] = lambda ft, x, i, y: jnp.asarray(x).at[i].add(y)
OPS["select_n"] = lambda ft, w, a, b, c: lax.select_n(jnp.clip(w, 0, 2), a, b, c)
OPS["dyn_slice"] = lambda ft, x, i, *, axis, size: lax.dynamic_slice_in_dim(x, i, size, axis)
OPS["isfinite"] = lambda ft, x: jnp.isfinite(x)
OPS["take"] = lambda ft, x, i, *, axis: jnp.take(x, i, axis=axis, mode="clip")
OPS["tensordot"] = lambda ft, x, y, *, ax: jnp.tensordot(x, y, axes=ax).astype(ft)
OPS["matmul_const"] = lambda ft, x, *, seed, m: x @ _cf(ft, seed, (x.shape[-1], m))
OPS["softmax"] = lambda ft, x, *, axis: jax.nn.softmax(x, axis=axis)
OPS["logsumexp"] = lambda ft, x, *, axis: jax.nn.logsumexp(x, axis=axis)


def _affine_consts(ft, seed, shape, g, b):
    gamma = _cf(ft, seed, shape, 0.5, 1.5) if g else None
    beta = _cf(ft, seed + 1, shape) if b else None
    return gamma, beta


@op("layer_norm")
def _ln(ft, x, *, axis, eps, seed, g, b, rms):
    gamma, beta = _affine_consts(ft, seed, x.shape[axis:], g, b)
    f = rnn.rms_norm if rms else rnn.layer_norm
    return f(x, gamma, beta, axis=axis, eps=eps)


@op("group_norm")
def _gn(ft, x, *, groups, eps, seed, channel_axis):
    gamma, beta = _affine_consts(ft, seed, (x.shape[channel_axis],), True, True)
    return rnn.group_norm(x, gamma, beta, num_groups=groups, eps=eps, channel_axis=channel_axis)


@op("batch_norm")
def _bn(ft, x, *, axis, eps, seed):
    c = (x.shape[axis],)
    gamma, beta = _affine_consts(ft, seed, c, True, True)
    return rnn.batch_norm(x, gamma, beta, _cf(ft, seed + 2, c), _cf(ft, seed + 3, c, 0.2, 2.0),
                          eps=eps, axis=axis)


@op("batch_norm_train")
def _bnt(ft, x, *, axis, eps, seed, which):
    c = (x.shape[axis],)
    gamma, beta = _affine_consts(ft, seed, c, True, True)
    out = rnn.batch_norm_train(x, gamma, beta, eps=eps, axis=axis, momentum=0.9,
                               running_mean=_cf(ft, seed + 2, c),
                               running_var=_cf(ft, seed + 3, c, 0.2, 2.0))
    return out[which]


@op("layer_norm2d")
def _ln2d(ft, x, *, eps, seed):
    gamma, beta = _affine_consts(ft, seed, (x.shape[1],), True, True)
    return rnn.layer_norm2d(x, gamma, beta, eps=eps)


OPS["ada_layer_norm"] = lambda ft, x, s, h, *, kind, eps: rnn.ada_layer_norm(
    x, s, h, kind=kind, eps=eps)
OPS["gated_residual"] = lambda ft, x, y, g: rnn.gated_residual(x, y, g)


def run(program: Program, args, ft=jnp.float32, taps=None, full=False):
    """Interpret ``program`` on ``args`` (a list of arrays) with float dtype ``ft``.

    ``taps`` (one array or None per pool value) are added to the values as they enter the
    top-level pool: the gradient with respect to them is the cotangent of each value, which
    the fuzz oracle uses to size the terms a gradient is summed from. ``full`` returns the
    whole pool instead of the outputs."""
    pool = list(args)
    _run_steps(program.steps, pool, ft, taps)
    return tuple(pool) if full else tuple(pool[i] for i in program.outputs)


def _tap(pool, start, taps):
    for k in range(start, len(pool)):
        if taps is not None and taps[k] is not None:
            pool[k] = pool[k] + taps[k]


def _run_steps(steps, pool, ft, taps=None):
    _tap(pool, 0, taps)
    for name, ids, params in steps:
        start = len(pool)
        if name == "jit":
            body, n = params["body"], len(pool)

            def inner(*vals, body=body):
                local = list(vals)
                _run_steps(body, local, ft)
                return tuple(local[n:])

            wrap = jax.checkpoint if params.get("remat") else jax.jit
            pool.extend(wrap(inner)(*pool))
        else:
            pool.append(OPS[name](ft, *(pool[i] for i in ids), **params))
        _tap(pool, start, taps)


def make_inputs(program: Program, ft=np.float32):
    rng = np.random.default_rng(program.seed)
    out = []
    for shape, kind in program.inputs:
        if kind == "f":
            out.append(rng.uniform(-2, 2, shape).astype(np.float32).astype(ft))
        elif kind == "i":
            out.append(rng.integers(-6, 7, shape).astype(np.int32))
        else:
            out.append(rng.random(shape) < 0.5)
    return out


@op("loop_draw")
def _loop_draw(ft, x, *, seed, steps):
    """``x`` halved ``steps`` times in a ``lax.while_loop`` that adds a random 0 / 1 each
    step, drawn from a key it carries (a sampling loop: a bounded while drawing next to
    device values, its counter and key literals / constants - the case that crashed
    rlxjax's random split). The bits are integers, the same in every evaluation (float64
    too). The loop reads ``stop_gradient(x)`` and ``x`` enters linearly outside it, so
    ``jax.grad`` (which cannot reverse a while_loop) sees the derivative ``0.5 ** steps``."""
    key = jax.random.key(seed)
    c = 0.5 ** steps

    def body(s):
        i, k, v = s
        k, sub = jax.random.split(k)
        bit = (jax.random.bits(sub, jnp.shape(v)) >> 31).astype(v.dtype)
        return i + 1, k, v * 0.5 + bit

    x0 = lax.stop_gradient(x)
    loop = lax.while_loop(lambda s: s[0] < steps, body, (0, key, x0))[2]
    return x * c + (loop - x0 * c)

