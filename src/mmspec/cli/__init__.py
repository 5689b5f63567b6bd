"""`mmspec <command>`: one subcommand per workflow stage, so every stage also runs by hand, and
one per tool around a sweep (plan, cells, fetch, reference, verify-lossless, ...).

Both are declared by their modules, and nothing lists them by hand: a stage is a module of
`mmspec.stages`, a tool one of `mmspec.cli.tools`, each declaring `HELP`, `add_arguments` and
`main` (`commands.read`; a tool's command is its module's name with dashes). Their declarations
are read from the source and only the command that runs is imported, so `mmspec --help` and
Snakemake's parse do not import torch."""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path

from mmspec import commands

PACKAGE = Path(__file__).resolve().parents[1]
TOOLS = Path(__file__).resolve().parent / "tools"


@functools.cache
def declared_tools() -> dict[str, commands.Stage]:
    """Every tool's declaration, by its command (`mmspec.cli.tools`)."""
    return {name.replace("_", "-"): tool for name, tool in commands.declared(TOOLS).items()}


def _module(command: str) -> str:
    tool = declared_tools().get(command)
    return f"{__name__}.tools.{tool.name}" if tool else commands.stage(command).module


def build_parser(filled: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command line: one subcommand per stage (`mmspec.stages`) and per tool
    (`mmspec.cli.tools`), each declaring its own arguments. `filled`: the commands whose
    arguments are added (each imports its module, and so torch for the model stages); default
    every command."""
    parser = argparse.ArgumentParser(prog="mmspec", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    every = commands.declared() | declared_tools()
    filled = every if filled is None else filled
    for name, declared in every.items():
        p = sub.add_parser(name, help=declared.help)
        if name in filled:
            # by name: a command's module is imported only when its command line is needed
            module = importlib.import_module(_module(name))
            module.add_arguments(p)
            p.set_defaults(main=module.main)
    return parser


def main(argv: list[str] | None = None, warm: bool | None = None, as_command: bool = False) -> int:
    """`mmspec <argv>` (the command line when None; `as_command`: `argv` run as that command line
    would be, as a batch job runs each of its cells). `warm`: hand a generate job to a warm worker
    (`mmspec.workflow.worker`); by default only from the command line, not from Python. A GPU job
    started from the command line by a workflow that shares a workstation's GPUs first takes one of
    them (`mmspec.workflow.gpus`)."""
    from mmspec.workflow import gpus
    from mmspec.workflow.private_folder import NotPrivate

    from_command_line = argv is None or as_command
    argv = sys.argv[1:] if argv is None else argv
    if from_command_line and argv:
        try:
            gpus.hold(argv[0])
        except NotPrivate as error:
            if os.environ.get("MMSPEC_TRACEBACK"):
                raise
            print(f"mmspec {argv[0]}: error: {error}", file=sys.stderr)
            return 1
    try:
        return _main(argv, from_command_line if warm is None else warm)
    finally:
        gpus.release()


def _main(argv: list[str], warm: bool) -> int:
    stage = commands.declared().get(argv[0]) if argv else None
    if warm and stage is not None and stage.warm:
        from mmspec.workflow import worker

        if worker.enabled() and (code := worker.delegate(argv)) is not None:
            return code
    args = build_parser(filled=argv[:1]).parse_args(argv)
    try:
        return args.main(args) or 0
    except Exception as error:
        if isinstance(error, BrokenPipeError):  # its reader stopped early (`| head`): quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        # one line saying what and where, not a traceback burying the message
        # (MMSPEC_TRACEBACK=1 re-raises, for debugging mmspec itself)
        if os.environ.get("MMSPEC_TRACEBACK"):
            raise
        print(f"mmspec {args.stage}: error: {one_line(error)}", file=sys.stderr)
        return 1


def one_line(error: Exception) -> str:
    """An exception as one line. A bad-input error (ValueError, KeyError, FileNotFoundError) that
    mmspec or a library raises by its message (it names the file, key or sample); any other with
    its type; and one raised in a plugin's or your own code with its type and where it was
    raised, so that a bug in your own component is not mistaken for bad input."""
    from mmspec.plugins import import_closure

    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    message = " ".join(str(message).split())
    frames = traceback.extract_tb(error.__traceback__)
    origin = frames[-1] if frames else None
    ours = origin is None or Path(origin.filename).resolve().is_relative_to(PACKAGE)
    if not ours and not import_closure.is_library_source(origin.filename):
        return (
            f"{type(error).__name__}: {message} (raised at {origin.filename}:{origin.lineno}; "
            "MMSPEC_TRACEBACK=1 prints the traceback)"
        )
    if isinstance(error, (ValueError, KeyError, FileNotFoundError)):
        return message
    return f"{type(error).__name__}: {message}"
