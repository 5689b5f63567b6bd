"""MkDocs hook: a visible note before every code block marked `<!-- needs: KIND -->`.

A page marks a block whose commands need what this machine may lack (a GPU, a Slurm cluster, the
network, the example plugin) with an HTML comment on the line before its fence. The marker stays
in the Markdown, where tests/test_docs.py reads it; on the site a comment shows nothing, so this
hook puts a note before it (an admonition) saying what the block needs. A marker of a kind with
no note here stops the build, naming the page.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError

# A marker, as tests/test_docs.py reads it: the whole line right before a fence.
MARKER = re.compile(
    r"^(?P<indent>[ \t]*)<!-- needs: (?P<kind>[^>]+?) -->[ \t]*\n(?=(?P=indent)```)", re.M
)

# kind -> (title, text, the page that tells more and its label, or None)
NOTES = {
    "gpu": (
        "Needs a GPU",
        "Run this on a machine with a GPU or, where it gives `--profile slurm`, on a Slurm "
        "cluster with GPUs.",
        ("running-at-scale.md", "Running at scale"),
    ),
    "slurm": (
        "Needs a Slurm cluster",
        "Run this where Slurm's commands work, with your partition and account set in "
        "`slurm/config.yaml`.",
        ("running-at-scale.md#on-a-slurm-cluster", "On a Slurm cluster"),
    ),
    "network": (
        "Needs network access",
        "This block downloads: Python packages, or models and datasets into the Hugging Face "
        "cache.",
        None,
    ),
    "plugin": (
        "Needs the example plugin",
        "The components this block names are the example plugin's (`examples/plugin/`), "
        "installed into the same environment with `pip install -e examples/plugin`.",
        None,
    ),
}


def note(kind: str, indent: str, src_uri: str) -> str:
    """The admonition for a marker of `kind` on page `src_uri` (relative to docs/)."""
    if kind not in NOTES:
        raise PluginError(
            f"{src_uri}: `<!-- needs: {kind} -->` has no note in hooks/needs_notes.py "
            f"(known: {', '.join(NOTES)})"
        )
    title, text, more = NOTES[kind]
    if more and more[0].split("#")[0] != src_uri:  # no link from a page to itself
        text += f" See [{more[1]}]({'../' * src_uri.count('/')}{more[0]})."
    return f'{indent}!!! info "{title}"\n\n{indent}    {text}\n\n'


def add_notes(markdown: str, src_uri: str) -> str:
    """The page's Markdown with a note before each marker; the markers themselves are kept."""

    def before(match: re.Match) -> str:
        return note(match["kind"], match["indent"], src_uri) + match[0]

    return MARKER.sub(before, markdown)


def on_page_markdown(markdown: str, page, **_) -> str:
    return add_notes(markdown, page.file.src_uri)
