"""`pods <command> ...`: one entry point, each command implemented next to the code it drives.

Every module listed in COMMANDS exposes `add_arguments(parser)` (or the function named after a
colon), which adds the command's options
(and sub-commands) to its parser and sets `func(args) -> int`. Only the chosen command's module
is imported: the trainer pulls in torch and transformers (seconds of CPU), which `pods --help`,
`pods analyze` and `pods plot` never need.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

# This project's distribution (pyproject.toml). Its import name stays `pods`, the paper's name and
# the command's; PyPI's unrelated project "pods" (Open Data Science) imports as `pods` too.
DISTRIBUTION = "pods-rollouts"
SUMMARY = "Reproduction suite for PODS"

# sub-command name -> (module that implements it, one line of help)
COMMANDS = {
    "train": ("pods.training.trainer", "train one GRPO / GRPO-PODS run (resumes from its checkpoint when restarted)"),
    "fetch": ("pods.training.hub", "fetch a model or dataset from the hub once, into the hub cache and a local folder"),
    "warmstart": ("pods.training.warmstart_cli",
                  "supervised warm start of the tiny policy (the embedded base model), on the workflow's CPU kernels"),
    "cost": ("pods.training.cost",
             "each arm's seconds per optimiser step on this machine, by an interleaved benchmark"),
    "analyze": ("pods.study.analysis", "speedup table of a study over run directories"),
    "confirm": ("pods.study.confirm", "a confirmation's sequential decisions after its looks so far"),
    "calibrate": ("pods.study.views:add_calibrate_arguments",
                  "coverage, false decisions and power of every endpoint, by simulation"),
    "project": ("pods.study.views:add_project_arguments",
                "speedup = step efficiency / step cost beside the paper's, and projections onto other hardware"),
    "groups": ("pods.study.views:add_groups_arguments",
               "each arm's share of flat prompt groups and prompts drawn: what a pre-rollout filter could save"),
    "plot": ("pods.study.plots", "figures from run metrics (PNG + PDF)"),
    "paper": ("pods.paper.cli", "the paper's figures from the authors' released results"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, with the options of `command` only (the others print their help line)."""
    parser = argparse.ArgumentParser(prog="pods", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_line) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_line, description=help_line)
        if name == command:
            module, _, function = module.partition(":")
            getattr(importlib.import_module(module), function or "add_arguments")(command_parser)
    return parser


def _installed(name: str) -> importlib.metadata.Distribution | None:
    """The installed distribution `name`, or None; leftover build metadata (an old pods.egg-info in
    a checkout, found through the working directory) has no INSTALLER and is not an install."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return dist if dist.read_text("INSTALLER") is not None else None


def foreign_pods() -> str | None:
    """One line when another distribution named `pods` is installed beside this one: PyPI's unrelated
    `pods`, or an install of this project from before its rename. Both also provide the `pods`
    package, so which files `import pods` reads (and which checkout an editable install runs) is an
    accident of the order site-packages is read in."""
    other = _installed("pods")
    if other is None:
        return None
    if (other.metadata["Summary"] or "").startswith(SUMMARY):  # this project, installed before its rename
        if _installed(DISTRIBUTION) is None:
            return None  # the old install alone: it is the only `pods` there is
        return (f"an install of this project from before its rename (distribution 'pods' {other.version}) is "
                f"still installed beside {DISTRIBUTION}, and either may be the one imported: pip uninstall pods")
    return (f"the unrelated distribution 'pods' {other.version} ({other.metadata['Summary']}) is installed and "
            f"also imports as `pods`: pip uninstall pods, then reinstall {DISTRIBUTION} (pip install -e . in the "
            f"checkout)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if (clash := foreign_pods()) is not None:
        print(f"pods: error: {clash}", file=sys.stderr)
        return 2
    try:  # the commands need the `study` extra; a core-only install (no extras) says so in one line
        from pods.runs import RunFailed, RunInterrupted
        parser = build_parser(argv[0] if argv else None)
    except ModuleNotFoundError as exc:
        print(f"pods: {exc}: the command line needs the study extra (pip install -e '.[study]')", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # bad input: one clear line, no traceback
        print(f"pods {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RunInterrupted as exc:  # SIGTERM or Ctrl-C: the step finished and was checkpointed; rerun to resume
        print(f"pods {args.command}: interrupted: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside a run's steps, or twice: files are written whole, so it resumes
        print(f"pods {args.command}: interrupted (Ctrl-C); a run resumes from its last checkpoint", file=sys.stderr)
        return 130
    except RunFailed as exc:  # a run that stopped on its own numbers: said in one line, recorded in its summary
        print(f"pods {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
