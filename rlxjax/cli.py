"""The ``rlxjax`` command."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rlxjax", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser("demo", help="compile a small JAX model, save it, compare with JAX")
    demo.add_argument("--out", default="out", help="folder for the .mlpackage (default: out)")
    demo.add_argument("--target", default="iOS17", help="deployment target (default: iOS17)")
    demo.add_argument("--backend", default=None, choices=["reference", "coreml"],
                      help="default: coreml on macOS, reference elsewhere")
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        from .demo import run

        run(args.out, args.target, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
