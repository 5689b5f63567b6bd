"""`mmspec verify-lossless`: every lossless registry method, exactly, on two seeds; and the
verifier does catch a construction that is not lossless."""

from __future__ import annotations

import os
import subprocess

import pytest

from mmspec.decoding import catalog, trees
from mmspec.decoding.drafters import Drafter
from mmspec.decoding.proposal import Proposal
from mmspec.methods import verify

SEEDS = (0, 1)


@pytest.fixture(scope="module")
def verified():
    """seed -> the finished `mmspec verify-lossless --seed` run over every method; the seeds run
    side by side, one thread each (the enumeration is float64 and exact either way)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {
        seed: subprocess.Popen(
            ["mmspec", "verify-lossless", "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in SEEDS
    }
    outs = {}
    for seed, run in runs.items():
        stdout, stderr = run.communicate()
        outs[seed] = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
    return outs


@pytest.mark.parametrize("seed", SEEDS)
def test_every_lossless_registry_method_passes(verified, seed):
    out = verified[seed]
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[2:]]
    assert [r[0] for r in rows] == verify.lossless_methods()
    assert {"sd_chain", "sd_tree", "eagle2_tree", "sage", "tabed_mtcp"} <= {r[0] for r in rows}
    # every trained head, with a random head on the tiny target
    assert {"eagle", "eagle2", "dream", "medusa", "hydra", "kangaroo"} <= {r[0] for r in rows}
    for row in rows:
        assert float(row[1]) <= 1e-9 and row[2] == "==AR" and "ok" in row, row


def test_trees_three_levels_deep():
    """Four tokens (the prefill's and three more): proposals up to three levels deep."""
    methods = ["sd_tree", "eagle2_tree", "sage"]
    args = ["mmspec", "verify-lossless", "--seed", "2", "--tokens", "3"]
    out = subprocess.run(
        args + [a for m in methods for a in ("--method", m)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[2:]]
    assert [r[0] for r in rows] == methods and all(int(r[3]) == 2 * 8**4 for r in rows)


class BestOfTwoDraws(trees.TreePolicy):
    """Draws two tokens from q without replacement and proposes the likelier one, as if it had
    been drawn from q: pruning by the drawn identities, which biases rejection sampling."""

    name = "best_of_two_draws"
    params = ()

    @classmethod
    def max_depth(cls, spec: dict) -> int | None:
        return 1

    def propose(self, drafter, sampler, room):
        q = drafter.root(sampler)
        first = sampler.categorical(q)
        rest = q.clone()
        rest[first] = 0
        second = sampler.categorical(rest / rest.sum())
        best = first if q[first] >= q[second] else second
        return Proposal.chain([best], q.unsqueeze(0))


def test_the_verifier_catches_pruning_by_drawn_identity(monkeypatch):
    """A tree policy of its own, added to the catalog as a plugin's would be."""
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("tree", BestOfTwoDraws.name), BestOfTwoDraws)
    verdict = verify.verify_method("sd", {"tree": BestOfTwoDraws.name}, seed=0)
    assert verdict.tvd > 1e-3 and not verdict.passed
    assert verify.verify_method("sd", {"gamma": 1}, seed=0).passed  # the chain it replaces


def test_the_verifier_catches_a_wrong_residual(monkeypatch):
    """Sampling from p instead of norm(max(0, p - q)) after a rejection is biased."""
    monkeypatch.setattr("mmspec.decoding.acceptance.sampling._residual", lambda p, q: p / p.sum())
    verdict = verify.verify_method("sd", {}, seed=1)
    assert verdict.tvd > 1e-3 and verdict.greedy_equal


class NeverDrafts(Drafter):
    """A drafter of its own that proposes nothing, ever: every step is an AR step."""

    name = "never_drafts_of_tests"

    @classmethod
    def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
        return cls(temperature)

    def start(self, prompts, first_token, target):
        pass

    def root(self, sampler):
        return None

    def commit(self, tree, path, next_token, target):
        pass


def test_a_drafter_that_never_drafts_is_untested_not_ok(monkeypatch):
    """Exact and equal to AR, trivially: nothing of its drafts was checked, and the check says
    so (UNTESTED, exit status 1) instead of ok."""
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", NeverDrafts.name), NeverDrafts)
    verdict = verify.verify_method("sd_chain", {"drafter": NeverDrafts.name}, seed=0)
    assert verdict.tvd <= verify.TOLERANCE and verdict.greedy_equal
    assert verdict.drafted == 0 and verdict.proposals > 0 and not verdict.passed
    lines = []
    passed = verify.run(0, ["sd_chain"], {"drafter": NeverDrafts.name}, 2, echo=lines.append)
    assert not passed
    assert "UNTESTED never drafted in" in lines[-1], lines[-1]


def test_cli_rejects_unknown_methods():
    out = subprocess.run(
        ["mmspec", "verify-lossless", "--method", "nope"], capture_output=True, text=True
    )
    assert out.returncode == 1 and "unknown method 'nope'" in out.stderr


def test_a_rule_lossy_by_declaration_is_marked_lossy_not_failed():
    """random_relax at rho 0.5 leaves the target's distribution, as it declares: the line says
    LOSSY and why, and the run still passes; at rho 0 it is the lossless rule, checked as one."""
    lines = []
    assert verify.run(0, ["random_relax"], {}, 1, echo=lines.append)
    name, tvd, greedy, *rest = lines[-1].split()
    assert name == "random_relax" and float(tvd) > 1e-3 and "FAIL" not in rest
    assert "LOSSY lossy by declaration (acceptance 'random_relax' with relax_rho=0.5)" in lines[-1]
    assert "a distance from the target is expected" in lines[-1]
    lines.clear()
    assert verify.run(0, ["random_relax"], {"relax_rho": 0}, 1, echo=lines.append)
    name, tvd, greedy, *rest = lines[-1].split()
    assert float(tvd) <= verify.TOLERANCE and greedy == "==AR" and rest[-1] == "ok", lines[-1]


def test_a_lossless_failure_beside_a_lossy_method_still_fails_the_run(monkeypatch):
    """LOSSY lines never change the exit status; a method declared lossless that is not exact
    does."""
    monkeypatch.setattr("mmspec.decoding.acceptance.sampling._residual", lambda p, q: p / p.sum())
    lines = []
    assert not verify.run(1, ["random_relax", "sd"], {}, 1, echo=lines.append)
    assert lines[-2].split()[0] == "random_relax" and " LOSSY " in lines[-2]
    assert lines[-1].split()[0] == "sd" and " FAIL " in lines[-1] + " "
