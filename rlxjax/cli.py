"""The ``rlxjax`` command."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rlxjax", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser(
        "demo", help="train a small digits classifier through its ML Program, side by side "
        "with JAX + optax; save the training program, the trained model and a loss plot")
    demo.add_argument("--out", default="out", help="output folder (default: out)")
    demo.add_argument("--steps", type=int, default=None,
                      help="training steps (default: 200)")
    demo.add_argument("--target", default="iOS17", help="deployment target (default: iOS17)")
    demo.add_argument("--backend", default=None, choices=["reference", "coreml"],
                      help="default: coreml on macOS, reference elsewhere")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument("--no-coreai", action="store_true",
                      help="skip the Core AI run (done when rlxjax[coreai] is installed)")
    insp = sub.add_parser("inspect", help="describe a saved .mlpackage: inputs, outputs, "
                          "training roles, target, MIL op histogram")
    insp.add_argument("path", help="a .mlpackage folder")
    from .compile_cli import add_parser as add_compile_parser

    add_compile_parser(sub)
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        from .demo import DEFAULT_STEPS, run

        steps = DEFAULT_STEPS if args.steps is None else args.steps
        if steps < 1:
            parser.error("--steps must be at least 1")
        report = run(args.out, steps=steps, target=args.target, backend=args.backend,
                     progress=not args.no_progress, coreai=not args.no_coreai)
        if not report["ok"]:
            print(f"rlxjax demo: rlxjax's final loss {report['loss_rlxjax']:.6g} differs "
                  f"from JAX's {report['loss_jax']:.6g} by {report['rel_diff']:.2e} relative",
                  file=sys.stderr)
            return 1
        return 0
    if args.cmd == "inspect":
        from .inspect_package import InspectError, describe

        try:
            print(describe(args.path))
        except InspectError as e:
            print(f"rlxjax inspect: {e}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "compile":
        from .compile_cli import run as run_compile

        return run_compile(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
