"""Argument types shared by the stages' command lines: JSON, and a config section parsed into
its typed settings (`stages.settings`), their errors named on the command line."""

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
        from mmspec.stages import settings as typed

        try:
            return getattr(typed, kind).parse(json_object(text))
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind
    return parse
