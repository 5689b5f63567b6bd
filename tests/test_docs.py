"""The documentation: the site builds with no warning (`mkdocs build --strict`, links and anchors
checked), the generated reference pages match the code, and every code block of the docs and the
README still works:

- ```yaml blocks are sweep configs, merged over config/config.yaml as `snakemake --configfile`
  does and expanded into cells (every key known to the schema and the registry);
- ```bash blocks: each `mmspec ...` command parses with mmspec's own parser (the command and
  its options exist); each `snakemake ... --configfile F` names a config that validates; each
  `python path/to/script.py`, `pip install -e path` and `--profile` names what exists;
- a block after `<!-- file: PATH -->` is PATH's contents, byte for byte (the worked example of
  a plugin is the example plugin that tests/test_plugin.py runs).

A block marked `<!-- needs: gpu -->`, `<!-- needs: network -->`, `<!-- needs: slurm -->` or
`<!-- needs: plugin -->` on the line before its fence names files or models not at hand here:
its commands are still parsed, its files and configs are not read. On the site each such marker
shows as a note saying what the block needs (hooks/needs_notes.py; checked below).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mmspec.cli import build_parser, reference
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(
    r"^(?:<!-- (?P<mark>needs|file): (?P<what>[^>]+?) -->\n)?"  # the line before the fence
    r"```(?P<lang>[\w-]*)\n(?P<body>.*?)^```",
    re.M | re.S,
)


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    needs: str | None = None
    file: str | None = None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(text: str, page: Path) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("lang")) + 1
        mark, what = m["mark"], m["what"]
        found.append(
            Block(
                page,
                line,
                m["lang"],
                m["body"],
                needs=what if mark == "needs" else None,
                file=what if mark == "file" else None,
            )
        )
    return found


def commands(body: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, here-documents' bodies left
    out, `$(...)` inner commands taken out, split at `&&`, `||`, `;` and `|`, leading VAR=value
    assignments dropped."""
    text = re.sub(r"\\\n\s*", " ", body)
    lines, end = [], None
    for line in text.splitlines():
        if end is not None:
            end = None if line.strip() == end else end
            continue
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            end = heredoc[1]
            line = line[: heredoc.start()]
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    found = []
    for line in lines:
        inner = re.findall(r"\$\(([^)]*)\)", line)
        line = re.sub(r"\$\(([^)]*)\)", "SUBSTITUTED", line)
        for part in [line, *inner]:
            found += _split(part)
    return found


def _split(line: str) -> list[list[str]]:
    """One shell line's simple commands (quotes respected; redirections dropped)."""
    line = re.sub(r"(?<=\s)\d+(?=>)", "", line)  # `2>&1`: the descriptor goes with its `>`
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    found, words, skip = [], [], False
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            found.append(words)
            words = []
        elif token in (">", ">>", "<", "2>", ">&"):
            skip = True
        elif skip:
            skip = False
        elif not words and re.match(r"^[A-Z_][A-Z0-9_]*=", token):
            continue  # an environment assignment before the command
        else:
            words.append(token)
    return [w for w in [*found, words] if w]


def check_config(text: str, where: str, tmp_path: Path) -> None:
    path = tmp_path / "snippet.yaml"
    path.write_text(text)
    try:
        cfg = mmconfig.load_as_snakemake(path, ROOT / "config" / "config.yaml")
        mmcells.expand(cfg)
    except Exception as error:  # noqa: BLE001 (any refusal is the finding)
        raise AssertionError(f"{where}: the config does not validate: {error}") from None


def check_command(words: list[str], block: Block, tmp_path: Path) -> None:
    where = f"{block}: `{' '.join(words)}`"
    program, args = words[0], words[1:]
    if program == "mmspec":
        try:
            build_parser().parse_args(args)
        except SystemExit:
            raise AssertionError(f"{where}: mmspec does not accept it") from None
        return
    if block.needs:
        return
    if program == "snakemake":
        for flag, value in zip(args, args[1:], strict=False):
            if flag == "--configfile":
                assert (ROOT / value).is_file(), f"{where}: no file {value}"
                check_config((ROOT / value).read_text(), where, tmp_path)
            if flag == "--profile":
                assert (ROOT / value).is_dir() or (ROOT / "profiles" / value).is_dir(), where
    elif program in ("python", "python3") and args and args[0].endswith(".py"):
        assert (ROOT / args[0]).is_file(), f"{where}: no script {args[0]}"
    elif program == "pip" and "-e" in args:
        target = args[args.index("-e") + 1].split("[")[0]
        assert (ROOT / target).is_dir(), f"{where}: nothing to install at {target}"


def check_page(text: str, page: Path, tmp_path: Path) -> int:
    """Check every block of a page; how many were checked."""
    checked = 0
    for block in blocks(text, page):
        if block.file is not None:
            expected = (ROOT / block.file).read_text()
            assert block.body.rstrip("\n") == expected.rstrip("\n"), f"{block}: != {block.file}"
        elif block.lang == "yaml" and block.needs is None:
            check_config(block.body, str(block), tmp_path)
        elif block.lang in ("bash", "sh", "shell"):
            for words in commands(block.body):
                check_command(words, block, tmp_path)
        else:
            continue
        checked += 1
    return checked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_docs_works(page, tmp_path):
    check_page(page.read_text(), page, tmp_path)


def test_the_docs_have_blocks_to_check(tmp_path):
    counted = {p: check_page(p.read_text(), p, tmp_path) for p in PAGES}
    assert sum(counted.values()) >= 20, counted
    assert counted[ROOT / "README.md"] >= 2  # the two quick-start lines


def test_a_renamed_key_or_command_fails_the_check(tmp_path):
    """The checks catch what a rename leaves behind in the docs."""
    page = ROOT / "docs" / "snippet.md"
    good = "```yaml\ngeneration: {max_new_tokens: 16}\n```\n"
    assert check_page(good, page, tmp_path) == 1
    with pytest.raises(AssertionError, match="max_tokens"):
        check_page(good.replace("max_new_tokens", "max_tokens"), page, tmp_path)
    with pytest.raises(AssertionError, match="gama"):
        check_page("```yaml\nmethods: {sd: {gama: [1, 2]}}\n```\n", page, tmp_path)
    with pytest.raises(AssertionError, match="mmspec does not accept"):
        check_page("```bash\nmmspec cels config/config.yaml\n```\n", page, tmp_path)
    with pytest.raises(AssertionError, match="mmspec does not accept"):
        check_page("```bash\nmmspec claims results --breif\n```\n", page, tmp_path)
    with pytest.raises(AssertionError, match="no file"):
        check_page("```bash\nsnakemake --cores 1 --configfile nope.yaml\n```\n", page, tmp_path)
    marked = "<!-- needs: gpu -->\n```bash\nsnakemake --cores 1 --configfile mine.yaml\n```\n"
    assert check_page(marked, page, tmp_path) == 1
    (tmp_path / "f.py").write_text("x = 1\n")
    with pytest.raises(AssertionError, match="!= "):
        check_page(f"<!-- file: {tmp_path / 'f.py'} -->\n```python\nx = 2\n```\n", page, tmp_path)


def test_the_reference_pages_match_the_code():
    generated = reference.generated()
    stale = reference.stale()
    diffs = [
        "".join(
            difflib.unified_diff(
                path.read_text().splitlines(True),
                generated[path].splitlines(True),
                str(path.relative_to(ROOT)),
                "generated now",
            )
        )[:3000]
        for path in stale
    ]
    assert not stale, "run `mmspec reference` and commit docs/\n" + "\n".join(diffs)


def test_a_renamed_schema_key_makes_the_config_page_stale(monkeypatch):
    from mmspec import schema

    renamed = schema.load()
    generation = renamed["properties"]["generation"]["properties"]
    generation = {("max_tokens" if k == "max_new_tokens" else k): v for k, v in generation.items()}
    changed = {**renamed, "properties": {**renamed["properties"]}}
    changed["properties"]["generation"] = {
        **renamed["properties"]["generation"],
        "properties": generation,
    }
    monkeypatch.setattr(schema, "load", lambda: changed)
    assert reference.stale() == [reference.FOLDER / "config.md"]


def test_an_edited_claim_makes_its_paper_page_stale(tmp_path, monkeypatch):
    """A paper page shows its claims as config/claims/ states them: editing a claim's numbers
    makes that page, and no other, stale; a page without its markers is an error naming it."""
    import shutil

    from mmspec.claims import claim

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    assert reference.stale(docs) == []
    claims = claim.load()
    edited = [
        c
        if c.key != "LANTERN/tau-rises-with-k"
        else claim.Claim(**{**c.__dict__, "where": "Table 9"})
        for c in claims
    ]
    monkeypatch.setattr(claim, "load", lambda *a: edited)
    assert reference.stale(docs) == [docs / "papers" / "lantern.md"]
    page = docs / "papers" / "tabed.md"
    page.write_text(page.read_text().replace(reference.CLAIMS_END, ""))
    with pytest.raises(ValueError, match="tabed.md: needs one"):
        reference.stale(docs)


def test_the_site_builds_with_no_warning(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's banner about MkDocs 2
    )
    assert out.returncode == 0, out.stdout + out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, out.stderr
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "reference" / "config" / "index.html").is_file()
    # every `<!-- needs: ... -->` marker shows on the site as a note (hooks/needs_notes.py)
    for page in (ROOT / "docs").rglob("*.md"):
        marked = [b for b in blocks(page.read_text(), page) if b.needs]
        name = page.relative_to(ROOT / "docs").with_suffix("")
        html = tmp_path / ("index.html" if name.name == "index" else name / "index.html")
        notes = html.read_text().count('<p class="admonition-title">Needs ')
        assert notes == len(marked), f"{page.relative_to(ROOT)}: {notes} notes, {len(marked)} marks"


def test_the_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def needs_notes():
    """The site's hook that turns needs-markers into notes (hooks/needs_notes.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("needs_notes", ROOT / "hooks" / "needs_notes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_needs_marker_gets_a_note_and_keeps_its_marker():
    """The note goes before the marker, which stays on the line before its fence (so the checks
    above still read it); a kind without a note stops the site's build."""
    from mkdocs.exceptions import PluginError

    hook = needs_notes()
    page = "<!-- needs: gpu -->\n```bash\nmmspec gpu-check\n```\n"
    noted = hook.add_notes(page, "papers/x.md")
    assert noted.startswith('!!! info "Needs a GPU"') and noted.endswith(page)
    assert "](../running-at-scale.md)" in noted  # links relative to the page
    assert [b.needs for b in blocks(noted, ROOT / "docs" / "x.md")] == ["gpu"]
    assert hook.add_notes("<!-- needs: gpu -->\ntext, not a fence\n", "x.md").count("!!!") == 0
    with pytest.raises(PluginError, match="x.md: `<!-- needs: tpu -->` has no note"):
        hook.add_notes(page.replace("gpu", "tpu"), "x.md")
    kinds = {b.needs for p in PAGES for b in blocks(p.read_text(), p) if b.needs}
    assert kinds <= set(hook.NOTES), kinds - set(hook.NOTES)


def test_every_paper_page_links_its_code_and_ends_with_its_bibtex():
    """Each paper page names its paper(s) near the top, links code where the paper has any, and
    ends with a Citing section of BibTeX entries, each with a title and authors and balanced
    braces."""
    for page in sorted((ROOT / "docs" / "papers").glob("*.md")):
        text = page.read_text()
        where = page.relative_to(ROOT)
        assert re.search(r"^\*\*Papers?:\*\* ", text, re.M), f"{where}: no **Paper:** line"
        assert text.index("**Paper") < text.index("## What the paper claims"), where
        assert re.search(r"\]\(https://github\.com/[\w.-]+/[\w.-]+\)", text), f"{where}: no code"
        citing = text[text.index("\n## Citing\n") :]
        bibtex = [b.body for b in blocks(citing, page) if b.lang == "bibtex"]
        assert bibtex, f"{where}: no ```bibtex block under ## Citing"
        entries = re.split(r"^(?=@)", "".join(bibtex), flags=re.M)[1:]
        assert entries, where
        for entry in entries:
            assert re.match(r"@\w+\{[\w:.-]+,", entry), f"{where}: {entry[:40]}"
            assert re.search(r"^\s+title\s*=", entry, re.M), f"{where}: {entry[:40]} no title"
            assert re.search(r"^\s+author\s*=", entry, re.M), f"{where}: {entry[:40]} no author"
            assert entry.count("{") == entry.count("}"), f"{where}: {entry[:40]} braces"
