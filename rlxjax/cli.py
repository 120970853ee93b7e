"""rlxjax compiles JAX training code (jax.numpy / flax / equinox + optax) into programs that
train on Apple devices: Core ML ML Programs (.mlpackage) and Core AI programs (.aimodel).
Forward, backward and the optimizer update are one program; run it here on the reference
interpreter (Core ML) or Apple's Core AI runtime, or in an app on the device."""
from __future__ import annotations

import argparse
import os
import sys

_EPILOG = ("commands: demo (train a small model both ways, side by side with JAX), inspect "
           "(describe a .mlpackage or .aimodel), compile (a JAX function to a package). "
           "Errors are one line; --traceback shows the whole story.")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlxjax", description=__doc__, epilog=_EPILOG)
    parser.add_argument("--traceback", action="store_true",
                        help="on an error, show Python's whole traceback (for a bug report)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser(
        "demo", help="train a small digits classifier through its Core ML program (and its "
        "Core AI program when rlxjax[coreai] is installed), side by side with JAX + optax; "
        "save the training programs, the trained model and a loss plot")
    demo.add_argument("--out", default="out", help="output folder (default: out)")
    demo.add_argument("--steps", type=int, default=None,
                      help="training steps (default: 200)")
    demo.add_argument("--target", default="iOS17", help="deployment target (default: iOS17)")
    demo.add_argument("--backend", default=None, choices=["reference", "coreml"],
                      help="default: coreml on macOS, reference elsewhere")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument("--no-coreai", action="store_true",
                      help="skip the Core AI run (done when rlxjax[coreai] is installed)")
    insp = sub.add_parser("inspect", help="describe a saved package (.mlpackage or .aimodel): "
                          "inputs, outputs, states, training roles, target, op histogram")
    insp.add_argument("path", help="a .mlpackage or .aimodel folder")
    from .compile_cli import add_parser as add_compile_parser

    add_compile_parser(sub)
    return parser


def _demo_flags(args) -> str | None:
    """What is wrong with the demo's flags (before anything is trained), or None."""
    from .coreml.targets import get_target
    from .errors import RlxError
    from .formats.backends import resolve_backend

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        return f"--out {args.out}: it is a file; the demo writes a folder (name a new one)"
    try:
        get_target(args.target)
        resolve_backend(args.backend)
    except RlxError as e:
        return str(e).strip().splitlines()[0]
    return None


def _run_demo(parser, args) -> int:
    from .demo import DEFAULT_STEPS, run

    steps = DEFAULT_STEPS if args.steps is None else args.steps
    if steps < 1:
        parser.error("--steps must be at least 1")
    bad = _demo_flags(args)
    if bad:
        print(f"rlxjax demo: {bad}", file=sys.stderr)
        return 2
    report = run(args.out, steps=steps, target=args.target, backend=args.backend,
                 progress=not args.no_progress, coreai=not args.no_coreai)
    if not report["ok"]:
        print(f"rlxjax demo: rlxjax's final loss {report['loss_rlxjax']:.6g} differs "
              f"from JAX's {report['loss_jax']:.6g} by {report['rel_diff']:.2e} relative",
              file=sys.stderr)
        return 1
    return 0


def _dispatch(parser, args) -> int:
    if args.cmd == "demo":
        return _run_demo(parser, args)
    if args.cmd == "inspect":
        from .inspect_package import InspectError, describe

        try:
            text = describe(args.path)
        except InspectError as e:
            print(f"rlxjax inspect: {e}", file=sys.stderr)
            return 2
        print(text)
        return 0
    if args.cmd == "compile":
        from .compile_cli import run as run_compile

        return run_compile(args)
    return 2


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from .errors import RlxError

    try:
        rc = _dispatch(parser, args)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:  # `rlxjax inspect X | head`: the reader is gone; end quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a file descriptor (captured)
            pass
        return 141  # what a shell reports for a command ended by SIGPIPE
    except KeyboardInterrupt:
        if args.traceback:
            raise
        print(f"rlxjax {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except (RlxError, OSError) as e:
        if args.traceback:
            raise
        lines = str(e).strip().splitlines() or [type(e).__name__]
        more = " (more with --traceback)" if len(lines) > 1 else ""
        print(f"rlxjax {args.cmd}: {type(e).__name__}: {lines[0]}{more}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
