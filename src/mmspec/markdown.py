"""Markdown written by mmspec's generated pages (the reference pages, the claims' tables)."""

from __future__ import annotations


def markdown_cell(text) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")
