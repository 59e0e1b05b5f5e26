"""Layer 9, a face: the ``pytrain`` command (``pytrain.cli:main``, ``python -m pytrain``): generate artifacts, train,
evaluate, export and inspect; a failure the user can cause ends in one line ``pytrain: error: ...`` (exit 1)."""
# A bad command line exits with 2 (argparse's convention), every other failure the user can cause with 1.
from __future__ import annotations

import os
import sys
from typing import List, Optional

from pytrain.cli._common import PROG, Parser, error_line
from pytrain.errors import PytrainError


def build_parser() -> Parser:
    """The argparse parser with every subcommand."""
    from pytrain.base.version import __version__
    from pytrain.cli import evaluate, export, federate, generate, inspect_cmd, train

    parser = Parser(prog=PROG, description="On-device training for ONNX models in pure Python.")
    parser.add_argument("--version", action="version", version="pytrain " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for mod in (generate, train, evaluate, export, inspect_cmd, federate):
        mod.add_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    if getattr(args, "run", None) is None:
        sys.stderr.write("{}: error: choose a command: generate, train, eval, export, inspect "
                         "(see '{} --help')\n".format(PROG, PROG))
        return 2
    try:
        return int(args.run(args))
    except (PytrainError, OSError) as e:
        if os.environ.get("PYTRAIN_DEBUG"):
            raise
        sys.stderr.write(error_line(e) + "\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("{}: interrupted\n".format(PROG))
        return 130
    except Exception as e:  # a bug, but the user still gets one line (and a way to see more)
        if os.environ.get("PYTRAIN_DEBUG"):
            raise
        sys.stderr.write(error_line(RuntimeError("internal error, {}: {} (set PYTRAIN_DEBUG=1 for the "
                                                 "traceback)".format(type(e).__name__, e))) + "\n")
        return 1
