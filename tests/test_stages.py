"""A stage is declared once, in its own module (HELP, add_arguments, main, and its flags): the
command line, the code fingerprints and the GPU and warm-worker policies read the declaration."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from mmspec import cli, commands
from mmspec.commands import FOLDER
from mmspec.workflow import fingerprint

NEW_STAGE = '''
"""Stage count: the rows of a prepared dataset."""

import argparse

HELP = "count the rows of a prepared dataset"
GPU = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prepared", required=True)


def main(args: argparse.Namespace) -> None:
    print(args.prepared)
'''


@pytest.fixture
def folder(tmp_path):
    """A copy of the stages folder, to add modules to."""
    copy = tmp_path / "stages"
    shutil.copytree(FOLDER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_every_stage_is_a_subcommand_with_its_fingerprint():
    declared = commands.declared()
    assert {"prepare", "generate", "score", "aggregate", "report"} <= set(declared)
    assert "settings" not in declared and "arguments" not in declared  # helper modules
    parser = cli.build_parser()
    (choices,) = [a.choices for a in parser._actions if a.dest == "stage"]
    assert set(choices) == set(declared) | set(cli.declared_tools())
    for name in declared:
        assert fingerprint.fingerprint(name)
    with pytest.raises(ValueError, match="unknown stage 'nope'"):
        fingerprint.fingerprint("nope")


def test_a_module_with_the_declaration_is_a_stage(folder):
    (folder / "count.py").write_text(NEW_STAGE)
    (folder / "helper.py").write_text("WEIGHT = 1\n")
    found = commands.declared(folder)
    count = commands.Stage("count", "count the rows of a prepared dataset", gpu=True)
    assert found["count"] == count
    assert "helper" not in found
    assert set(found) - {"count"} == set(commands.declared())


def test_an_incomplete_declaration_names_its_file(folder):
    no_help = NEW_STAGE.replace('HELP = "count the rows of a prepared dataset"', "")
    (folder / "broken.py").write_text(no_help)
    with pytest.raises(ValueError, match=r"broken\.py: .*missing: \['HELP'\]"):
        commands.declared(folder)
    (folder / "broken.py").write_text(NEW_STAGE.replace("GPU = True", 'GPU = "yes"'))
    with pytest.raises(ValueError, match=r"broken\.py: GPU, WARM, READS_ALL_COMPONENTS are True"):
        commands.declared(folder)


def test_flags_follow_the_declarations():
    declared = commands.declared()
    assert {n for n, s in declared.items() if s.gpu} == {
        "generate",
        "cache_visual",
        "caption",
        "train_drafter",
    }
    assert declared["generate"].warm and not declared["judge"].warm
    # search_round aggregates its history as aggregate does, and resolves the searched method
    assert {n for n, s in declared.items() if s.reads_all_components} == {
        "aggregate",
        "report",
        "search_round",
    }


def test_the_command_line_imports_only_the_stage_that_runs():
    """`mmspec --help` and a light stage's command line do not import torch."""
    code = textwrap.dedent(
        """
        import sys
        from mmspec import cli
        cli.build_parser(filled=[]).format_help()
        cli.build_parser(filled=["prepare"]).parse_args(
            ["prepare", "--name", "x", "--spec", "{}", "--out", "o"]
        )
        print("torch" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
