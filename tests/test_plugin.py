"""A researcher's own components from their own package: examples/plugin, installed for real
(pip, into a folder on PYTHONPATH), joins the catalog through its entry points, runs in a sweep
through the workflow and in `mmspec verify-lossless`, reruns its cells when its code changes
(a helper module's included), and is named when it is missing. Nothing of mmspec changes for it.
Its prompt-lookup drafter reads tokens and proposes nothing when no n-gram recurs: verified
exactly at two seeds, and broken copies of the engine's handling of short proposals are caught."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from plugin_site import run as _run
from workflow_cli import ROOT, job_counts, snakemake_cmd

PLUGIN = ROOT / "examples" / "plugin"
SWEEP = {
    "seeds": [0],
    "generation": {"max_new_tokens": 10},
    "timing": {"warmup_samples": 0, "threads": 1},
    "toy": {
        "seed": 0,
        # trained on questions long enough (10 s) to answer by repeating their words ("where is
        # the red circle ?" -> "the red circle is at the top left ."): prompt lookup's case
        "models": {
            "target": {
                "hidden": 64,
                "layers": 2,
                "heads": 2,
                "steps": 800,
                "batch_size": 8,
                "lr": 0.003,
                "scenarios": ["toy_vqa"],
            },
        },
    },
    "datasets": {
        "toy_caption": {"source": "toy", "samples": 3},
        "toy_vqa": {"source": "toy", "samples": 6},
    },
    "pairs": {"toy": {"target": "toy:target"}},
    "methods": {
        "ar": {},
        "early_exit": {"gamma": 2},  # the plugin's method row: its drafter and mmspec's chain
        "exit_leviathan": {"method": "early_exit_leviathan"},  # and its rule
        "prompt_lookup": {},  # its drafter that reads tokens
    },
    "sweep": [
        {
            "datasets": ["toy_caption"],
            "pairs": ["toy"],
            "methods": ["ar", "early_exit", "exit_leviathan"],
        },
        {"datasets": ["toy_vqa"], "pairs": ["toy"], "methods": ["ar", "prompt_lookup"]},
    ],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder the example plugin is installed into (with its entry points' metadata)."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build") / "plugin"
    shutil.copytree(PLUGIN, build)  # pip builds in the source folder: keep the repository clean
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(build)],
        check=True,
    )  # fmt: skip
    return target


def test_the_plugins_components_join_the_catalog_and_its_methods_the_registry(site):
    code = (
        "from mmspec.decoding import catalog\n"
        "from mmspec.methods import registry\n"
        "print(catalog.get('drafter', 'early_exit').__module__)\n"
        "print(catalog.get('acceptance', 'leviathan').lossless)\n"
        "print(sorted(m.name for m in registry.PLUGIN_METHODS))\n"
        "print(sorted(registry.resolve('sd_chain', {'drafter': 'early_exit'}).params))\n"
        "lookup = catalog.get('drafter', 'prompt_lookup')\n"
        "print(lookup.__module__, lookup.reads_tokens, sorted(lookup.requires))\n"
        "print(sorted(registry.resolve('prompt_lookup', {}).params))\n"
        "for bad in ({'min_ngram': 4}, {'tree': 'static', 'paths': [[0]]}):\n"
        "    try:\n"
        "        registry.resolve('prompt_lookup', bad)\n"
        "    except ValueError as error:\n"
        "        print(error)\n"
    )
    out = _run([sys.executable, "-c", code], site)
    assert out.returncode == 0, out.stderr
    module, lossless, methods, keys, lookup, lookup_keys, *errors = out.stdout.splitlines()
    assert module == "mmspec_example.early_exit" and lossless == "True"
    assert methods == "['early_exit', 'early_exit_leviathan', 'prompt_lookup']"
    # drafting with the plugin's drafter, the row's views are no part of the cell
    assert "exit_layers" in keys and "views" not in keys
    # the prompt-lookup drafter reads tokens and needs nothing but the target
    assert lookup == "mmspec_example.prompt_lookup True []"
    assert {"max_ngram", "min_ngram", "gamma"} <= set(eval(lookup_keys))
    assert "views" not in lookup_keys
    assert "min_ngram=4 must not exceed max_ngram=3" in errors[0]
    assert "tree: chain" in errors[1]


def test_verify_lossless_proves_the_plugins_drafter_and_rule(site):
    cmd = [
        sys.executable, "-m", "mmspec.cli", "verify-lossless",
        "--method", "early_exit", "--method", "early_exit_leviathan",
    ]  # fmt: skip
    out = _run(cmd, site)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("early_exit")]
    assert len(lines) == 2 and all(line.split()[-1] in ("ok", "T=1") for line in lines)
    assert all(" ok" in line for line in lines)


@pytest.mark.parametrize("seed", [0, 1])
def test_verify_lossless_proves_the_prompt_lookup_drafter(site, seed):
    """Exact at temperature 1 and equal to AR at greedy; with the 8-word vocabulary n-grams
    recur, so some of the explored steps draft and acceptance is exercised."""
    cmd = [sys.executable, "-m", "mmspec.cli", "verify-lossless", "--method", "prompt_lookup"]
    out = _run([*cmd, "--seed", str(seed)], site)
    assert out.returncode == 0, out.stdout + out.stderr
    name, tvd, greedy, outcomes, drafted, *_ = out.stdout.splitlines()[2].split()
    assert name == "prompt_lookup" and float(tvd) <= 1e-9 and greedy == "==AR"
    assert int(outcomes) == 2 * 8**3  # every sequence of three tokens, on both prompts
    hits, proposals = map(int, drafted.split("/"))
    assert 0 < hits < proposals  # it drafts where an n-gram recurs, and only there


@pytest.fixture
def example(monkeypatch):
    """The example package imported from its source folder (its classes, not its entry points:
    the catalog of this process stays mmspec's own)."""
    monkeypatch.syspath_prepend(str(PLUGIN / "src"))
    from mmspec_example import ngram, prompt_lookup

    return ngram, prompt_lookup


def test_the_ngram_index_finds_the_latest_longest_match_and_never_a_barrier(example):
    ngram, _ = example
    index = ngram.NgramIndex(1, 3)
    index.extend([5, 6, 7, 9, 5, 6, 8, 5, 6])
    assert index.match() == 6  # (5, 6) at 0 and 4: the latest continues with 8, at 6
    index.extend([8, 1])
    assert index.match() is None  # 1 never occurred before
    index.extend([5, 6, 8])
    assert index.match() == 10  # (5, 6, 8) at 7, the longest recurring suffix, continues at 10
    two = ngram.NgramIndex(2, 3)
    two.extend([5, 6, 7, 6])
    assert two.match() is None  # only a 1-gram recurs
    barred = ngram.NgramIndex(1, 3)
    barred.extend([3, -1, -1, 4, 3])
    assert barred.match() is None  # the earlier 3 is followed by a barrier: nothing to copy
    barred.extend([-1, 4])
    assert barred.match() == 4  # 4 at 3 continues with 3; no n-gram spans the barriers


def _lookup_context(prompt: list[int], visual_id: int, output: list[int]):
    from mmspec.decoding.token_context import TokenContext, visual_spans

    ids = torch.tensor(prompt)
    visual = ids == visual_id
    return TokenContext(ids, visual, visual_spans(visual), None, list(output))


def test_prompt_lookup_copies_point_masses_and_never_matches_or_copies_visual_tokens(example):
    from mmspec.decoding.decoder import Forward
    from mmspec.decoding.drafters import HeadPrompts
    from mmspec.decoding.sampler import seeded
    from mmspec.decoding.trees import ChainPolicy

    _, prompt_lookup = example
    image, vocab = 4, 20
    prefill = Forward(torch.zeros(vocab), torch.zeros(1, 8))

    def proposal(prompt, output, temperature=0.0, gamma=5):
        drafter = prompt_lookup.PromptLookupDrafter(1, 3, temperature)
        context = _lookup_context(prompt, image, output[:1])
        drafter.start(HeadPrompts(None), output[0], prefill, context)
        context.output.extend(output[1:])  # as the loop does before each proposal
        return ChainPolicy(gamma).propose(drafter, seeded(0), room=10)

    # the output's last token, 10, was last followed by 11 13 14; then the copy reaches the output
    assert proposal([2, 10, 11, 13, 14], [9, 10]).tokens == [11, 13, 14, 9, 10]
    # the copy stops before an image's tokens
    assert proposal([10, 11, 12, image, image, 13], [10]).tokens == [11, 12]
    # nothing recurs, or only before an image: nothing proposed (an AR step)
    assert proposal([10, 11, image, image, 12], [11]).tokens == []
    # the image token id emitted by the target never matches the image's positions
    assert proposal([10, image, image, image, 12], [image]).tokens == []
    # at temperature > 0: the same copy, drawn from point masses
    sampled = proposal([2, 10, 11, 13, 14], [9, 10], temperature=1.0, gamma=3)
    assert sampled.tokens == [11, 13, 14] and sampled.q.argmax(-1).tolist() == [11, 13, 14]
    assert torch.equal(sampled.q.sum(-1), torch.ones(3)) and int((sampled.q > 0).sum()) == 3


# Realistic bugs in the engine's handling of what the new protocol makes common (empty and
# short proposals, point masses at temperature > 0), patched in before verify-lossless runs.
BROKEN = {
    "sampling emits the argmax when nothing was drafted": """
from mmspec.decoding.acceptance import sampling

exact = sampling.accept_sampling

def argmax_when_nothing_drafted(proposal, logits, temperature, sampler):
    if not proposal.tokens:
        return [], int(logits[0].argmax())
    return exact(proposal, logits, temperature, sampler)

sampling.Sampling.judge = staticmethod(argmax_when_nothing_drafted)
""",
    "the chain drops its first drafted token, its q rows still from the root": """
from mmspec.decoding import trees
from mmspec.decoding.proposal import Proposal

exact = trees.ChainPolicy.propose

def drops_first(self, drafter, sampler, room):
    chain = exact(self, drafter, sampler, room)
    if len(chain.tokens) < 2:
        return chain
    return Proposal.chain(chain.tokens[1:], None if chain.q is None else chain.q[:-1])

trees.ChainPolicy.propose = drops_first
""",
    "a step that accepts nothing leaves the rejected nodes in the target's cache": """
from mmspec.decoding import loops

exact = loops.Speculation.commit

def keeps_rejected_nodes(self, proposal, forward, path, token):
    if path:
        return exact(self, proposal, forward, path, token)
    self.target.keep = lambda base, rows: None
    try:
        return exact(self, proposal, forward, path, token)
    finally:
        del self.target.keep

loops.Speculation.commit = keeps_rejected_nodes
""",
}


@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_verify_lossless_catches_broken_handling_of_short_proposals(site, bug):
    """Each breaks the target's distribution at temperature 1 (not AR's greedy tokens on the
    tiny random models): verify-lossless prints its distance and exits with status 1."""
    run = "import sys\nfrom mmspec.cli import main\n"
    run += "sys.exit(main(['verify-lossless', '--method', 'prompt_lookup', '--seed', '0']))\n"
    out = _run([sys.executable, "-c", BROKEN[bug] + run], site)
    assert out.returncode == 1, out.stdout + out.stderr
    line = out.stdout.splitlines()[2].split()
    assert line[0] == "prompt_lookup" and "FAIL" in line
    assert float(line[1]) > 1e-6, line  # far above float64 rounding (1e-16)


@pytest.mark.slow
def test_a_sweep_runs_the_plugin_and_reruns_its_cells_when_its_code_changes(site, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(SWEEP))
    cmd = snakemake_cmd(tmp_path, config, "--until", "aggregate")
    out = _run(cmd, site)
    assert out.returncode == 0, out.stderr[-3000:]
    cells = pq.read_table(tmp_path / "results/summary/cells.parquet").to_pylist()
    drafted = {c["method"]: c for c in cells if c["method"] != "ar"}
    assert set(drafted) == {"early_exit", "exit_leviathan", "prompt_lookup"}
    for cell in drafted.values():  # greedy and lossless: the target's tokens exactly
        assert cell["lossless_rate"] == 1.0 and cell["tau"] >= 1.0, cell
    # answers that repeat their question's words: copies from the prompt are accepted
    assert drafted["prompt_lookup"]["dataset"] == "toy_vqa"
    assert drafted["prompt_lookup"]["tau"] > 1.0, drafted["prompt_lookup"]
    samples = next(tmp_path.glob("results/generate/*/*/method=prompt_lookup/*/*/samples.parquet"))
    steps = [d for row in pq.read_table(samples).to_pylist() for d in row["step_drafted"]]
    assert 0 in steps and max(steps) == 4  # steps with no n-gram drafted nothing

    # editing the plugin's rule reruns the cells that verify with it, and only those
    rule = next(site.glob("mmspec_example/leviathan.py"))
    source = rule.read_text()
    rule.write_text(source + "\n# edited\n")
    plan = _run([*cmd, "--dry-run"], site)
    assert plan.returncode == 0, plan.stderr
    assert job_counts(plan.stdout + plan.stderr).get("generate") == 1  # its cell's batch
    rule.write_text(source)

    # so does editing a helper module a drafter imports (the n-gram search), for its cells
    helper = next(site.glob("mmspec_example/ngram.py"))
    helper.write_text(helper.read_text() + "\n# edited\n")
    plan = _run([*cmd, "--dry-run"], site)
    assert plan.returncode == 0, plan.stderr
    assert job_counts(plan.stdout + plan.stderr).get("generate") == 1
    rerun = re.search(r"rule generate:.*?output: (\S+)", plan.stdout, re.S)
    assert rerun and "/method=prompt_lookup/" in rerun[1], plan.stdout

    # without the package, a config naming its method fails before any job, naming it
    missing = _run([*cmd, "--dry-run"], None)
    assert missing.returncode != 0
    assert "unknown method 'early_exit'" in missing.stdout + missing.stderr
