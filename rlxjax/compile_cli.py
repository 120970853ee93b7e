"""``rlxjax compile MODULE:FUNCTION --example SHAPES... -o OUT.mlpackage|OUT.aimodel [--grad]``.

Compiles a JAX function from a Python module or file into a Core ML package (``.mlpackage``)
or a Core AI program (``.aimodel``), without
writing a script: one ``--example`` spec per positional argument (``f32[8,4]``, ``i32[3]``,
``bool[]``). Every problem with the arguments, the module or the compilation is one line on
stderr and exit status 2 (``CompileCommandError``), never a traceback.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from typing import Callable, List, Sequence, Tuple

import numpy as np

from .formats import REGISTRY
from .ir import DType

# short name (what rlxjax prints) and the numpy spelling, both accepted
DTYPES = {d.value: d.np.name for d in DType}
_LONG = {v: k for k, v in DTYPES.items()}
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[([^\[\]]*)\]\s*$")


class CompileCommandError(Exception):
    """A one-line message for the user; the command exits with status 2."""


def parse_example(text: str) -> Tuple[Tuple[int, ...], np.dtype]:
    """``'f32[8,4]'`` -> ((8, 4), float32); ``'i32[]'`` is a scalar."""
    m = _SPEC.match(text)
    if not m:
        raise CompileCommandError(
            f"malformed --example {text!r}: write DTYPE[DIMS], e.g. f32[8,4], i32[3] or f32[] "
            "for a scalar")
    name, dims = m.group(1), m.group(2).strip()
    short = name if name in DTYPES else _LONG.get(name)
    if short is None:
        raise CompileCommandError(
            f"unknown dtype {name!r} in --example {text!r}; use one of "
            f"{', '.join(DTYPES)} (Core ML has no 64-bit or complex types)")
    shape: List[int] = []
    if dims:
        for d in dims.split(","):
            d = d.strip()
            if not d.isdigit():
                raise CompileCommandError(
                    f"malformed --example {text!r}: dimension {d!r} is not a non-negative "
                    "integer (shapes are static in Core ML programs)")
            shape.append(int(d))
    return tuple(shape), np.dtype(DTYPES[short])


def _is_path(module: str) -> bool:
    return module.endswith(".py") or "/" in module or os.sep in module


def load_module(module: str):
    """Import MODULE: a dotted name importable from the current folder, or a .py file."""
    if _is_path(module):
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise CompileCommandError(f"no such Python file: {module}")
        name = os.path.splitext(os.path.basename(path))[0] or "module"
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # so that the file can import its neighbours
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, mod)
        _run_import(module, lambda: spec.loader.exec_module(mod))
        return mod
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", module):
        raise CompileCommandError(f"{module!r} is neither a dotted module name nor a .py file")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a missing parent package
        found = None
    except Exception as e:  # noqa: BLE001 - importing a parent package failed
        raise CompileCommandError(f"importing {module} failed: {_one_line(e)}") from None
    if found is None:
        raise CompileCommandError(
            f"no module named {module!r} (looked in the current folder and on sys.path); "
            "pass a dotted module name or a path/to/file.py")
    return _run_import(module, lambda: importlib.import_module(module))


def _run_import(module: str, do):
    try:
        return do()
    except SystemExit as e:
        raise CompileCommandError(f"importing {module} called sys.exit({e.code})") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        raise CompileCommandError(f"importing {module} failed: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0]}" if msg else type(e).__name__


def resolve_function(mod, module: str, qualname: str) -> Callable:
    obj = mod
    for part in qualname.split("."):
        if not part or not hasattr(obj, part):
            raise CompileCommandError(f"{module} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CompileCommandError(f"{module}:{qualname} is not callable (it is a "
                                  f"{type(obj).__name__} object)")
    return obj


def check_arity(fun: Callable, label: str, n: int) -> None:
    """The number of --example specs must fit the function's positional parameters."""
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature: let tracing decide
    params = list(sig.parameters.values())
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in pos if p.default is p.empty]
    kw_required = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if kw_required:
        raise CompileCommandError(f"{label} has required keyword-only parameter(s) "
                                  f"{kw_required}; compile a function of positional arrays")
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if n < len(required) or (n > len(pos) and not varargs):
        names = ", ".join(p.name for p in pos)
        if varargs:
            want = f"at least {len(required)}"
        elif len(required) == len(pos):
            want = str(len(pos))
        else:
            want = f"{len(required)} to {len(pos)}"
        raise CompileCommandError(
            f"{label}({names}) takes {want} positional argument(s), but {n} --example "
            f"spec(s) were given (one per argument)")


#: what --format takes: the formats' registry names (rlxjax/formats/)
FORMATS = tuple(REGISTRY)

def compile_to_package(target_spec: str, examples: Sequence[str], out: str, grad: bool = False,
                       target: str | None = None, precision: str = "fp32",
                       format: str = "mlpackage") -> str:
    """Do the command's work; returns the summary printed on success. ``format``:
    "mlpackage" (Core ML, target default iOS17) or "aimodel" (Core AI, iOS27)."""
    if ":" not in target_spec:
        raise CompileCommandError(f"expected MODULE:FUNCTION, got {target_spec!r} "
                                  "(e.g. mymodel:predict or path/to/model.py:predict)")
    module, _, qualname = target_spec.rpartition(":")
    if not module or not qualname:
        raise CompileCommandError(f"expected MODULE:FUNCTION, got {target_spec!r}")
    if format not in FORMATS:
        raise CompileCommandError(f"--format {format!r}: choose {' or '.join(FORMATS)}")
    if not out.endswith(f".{format}"):
        raise CompileCommandError(
            f"the output must be a .{format} path, got {out!r}" if out.endswith(
                tuple(f".{f}" for f in FORMATS)) else
            f"the output must be a .mlpackage (Core ML) or .aimodel (Core AI) path, got "
            f"{out!r}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise CompileCommandError(f"-o {out}: it is a file; a package is a folder (name a "
                                  "new path or remove the file)")
    specs = [parse_example(e) for e in examples]  # bad specs fail before importing anything
    fun = resolve_function(load_module(module), module, qualname)
    check_arity(fun, target_spec, len(specs))

    import jax

    import rlxjax
    from .errors import RlxError

    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]
    try:
        wrap = rlxjax.coreml_grad if grad else rlxjax.coreml_jit
        backend = "reference" if format == "mlpackage" else None  # Core AI: its runtime
        wrapped = wrap(fun, target=target, precision=precision, backend=backend, format=format)
        compiled = wrapped.lower(*args).compile()
        compiled.validate()
        path = compiled.save(out)
    except RlxError as e:
        raise CompileCommandError(str(e).strip().replace("\n", " ")) from None
    except Exception as e:  # noqa: BLE001 - the user's function failed while tracing
        raise CompileCommandError(
            f"tracing {target_spec} on the example shapes failed: {_one_line(e)}") from None
    sig = lambda specs_: ", ".join(  # noqa: E731
        f"{s.mil_name}: {s.dtype}{list(s.shape)}" for s in specs_)
    n_ops = compiled.cost_analysis()["mil_ops"]
    what = "gradient of " if grad else ""
    kind = "MIL ops" if format == "mlpackage" else "Core AI ops"
    return (f"wrote {path}\n  {what}{target_spec}, {wrapped.target.name}, {precision}, "
            f"{n_ops} {kind}\n"
            f"  inputs:  {sig(compiled.input_specs)}\n  outputs: {sig(compiled.output_specs)}")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compile", help="compile MODULE:FUNCTION for example input shapes into a .mlpackage "
        "(Core ML) or an .aimodel (Core AI)",
        description="Compile a JAX function of arrays into a Core ML package (.mlpackage) or a "
        "Core AI program (.aimodel), chosen by the output's suffix. MODULE is a "
        "dotted module name importable from the current folder, or a path/to/file.py.")
    p.add_argument("function", metavar="MODULE:FUNCTION")
    p.add_argument("--example", nargs="+", default=[], metavar="SPEC",
                   help="one DTYPE[DIMS] per positional argument, e.g. f32[8,4] i32[3] f32[]; "
                   f"dtypes: {', '.join(DTYPES)}")
    p.add_argument("-o", "--output", required=True, metavar="OUT.mlpackage|OUT.aimodel")
    p.add_argument("--grad", action="store_true",
                   help="compile the gradient (coreml_grad) with respect to the first argument; "
                   "the function must return a float scalar")
    p.add_argument("--target", default=None,
                   help="deployment target (default: iOS17; iOS27 for --format aimodel)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    p.add_argument("--format", default=None, choices=FORMATS,
                   help="mlpackage (Core ML, the default) or aimodel (Core AI, needs "
                   "rlxjax[coreai]); default: from the output's suffix")


def run(args) -> int:
    try:
        fmt = args.format or ("aimodel" if args.output.endswith(".aimodel") else "mlpackage")
        print(compile_to_package(args.function, args.example, args.output, grad=args.grad,
                                 target=args.target, precision=args.precision, format=fmt))
    except CompileCommandError as e:
        print(f"rlxjax compile: {e}", file=sys.stderr)
        return 2
    return 0
