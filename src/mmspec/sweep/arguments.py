"""Arguments shared by the command lines of stages and tools: JSON, a config section parsed into
its typed settings (`stages.settings`), their errors named on the command line, and the config
files of a command that reads a sweep."""

from __future__ import annotations

import argparse
import json


def json_object(text: str) -> dict:
    """An argparse type: a JSON value (a config entry, a job's parameters)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None


def settings_of(kind: str):
    """An argparse type: JSON of a config section parsed into `stages.settings.<kind>`."""

    def parse(text: str):
        from mmspec.sweep import settings as typed

        try:
            return getattr(typed, kind).parse(json_object(text))
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind
    return parse


def sweep_files(p: argparse.ArgumentParser) -> None:
    """The config files of a command that reads a sweep as `mmspec cells` does."""
    p.add_argument("config", nargs="+", help="as for `mmspec cells`")
    p.add_argument("--default", default="config/config.yaml", help="as for `mmspec cells`")
