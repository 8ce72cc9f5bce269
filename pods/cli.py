"""`pods <command> ...`: one entry point, each command implemented next to the code it drives.

Every module listed in COMMANDS exposes `register(subparsers)`, which adds its sub-command(s) and
sets `func(args) -> int` on the sub-parser.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# sub-command name -> module that implements it
COMMANDS = {
    "train": "pods.trainer",
    "warmstart": "pods.warmstart",
    "analyze": "pods.analysis",
    "plot": "pods.plots",
    "paper": "pods.paper",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` only: importing the trainer's module pulls in
    torch and transformers (seconds of CPU), which `pods analyze` and `pods plot` never need."""
    parser = argparse.ArgumentParser(prog="pods", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # bad input: one clear line, no traceback
        print(f"pods {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
