"""`mmspec gpu-check` (src/mmspec/gpu_check/): its verdicts on cells, dtype runs and Snakemake
failures, the sampled cells it adds to the tour, and the real command's quick run on the CPU,
once with a cell that fails and once without."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from workflow_cli import ROOT

from mmspec import gpu_check
from mmspec.gpu_check.cells import cell_name, cell_rows, judge_cell
from mmspec.gpu_check.dtype_verdict import Decoded, divergence, dtype_row
from mmspec.gpu_check.sweep import explicit_rules, sweep_config
from mmspec.gpu_check.workflow import failed_jobs
from mmspec.methods.components import is_lossless
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig

# ---------------------------------------------------------------------------------------------
# verdicts

DONE = {
    "registry_method": "sd_chain",
    "temperature": 0.0,
    "lossless_rule": True,
    "acceptance": "greedy",
    "lossless_rate": 1.0,
    "first_divergence_mean": None,
    "tau": 3.5,
    "speedup": 2.0,
    "speedup_eq1": 2.5,
    "verify_cost": 1.3,
    "retention": 1.0,
    "retention_low": 0.9,
    "retention_high": 1.1,
    "fid_retention": None,
    "device": "cuda:NVIDIA H100 80GB HBM3",
}


def judged(expect_cuda=True, **changes):
    return judge_cell(gpu_check.Row("c"), {**DONE, **changes}, expect_cuda)


def test_a_greedy_lossless_cell_passes_only_when_every_output_equals_ar():
    ok = judged()
    assert (ok.status, ok.lossless, ok.tau, ok.speedup) == ("ok", "1.000", 3.5, 2.0)
    assert ok.eq1_ratio == pytest.approx(0.8) and ok.verify_cost == 1.3
    bad = judged(lossless_rate=0.95, first_divergence_mean=7.0)
    assert bad.status == "FAIL" and bad.lossless == "0.950"
    assert "0.95" in bad.why and "7.00" in bad.why
    assert judged(lossless_rate=None).status == "FAIL"  # a lossless cell nobody compared


def test_lossy_and_sampled_cells_pass_when_they_ran_and_show_their_retention():
    lossy = judged(lossless_rule=False, acceptance="lvspec", lossless_rate=None, retention=0.97)
    assert lossy.status == "ok" and lossy.lossless.startswith("lossy, retention 0.97")
    sampled = judged(temperature=1.0, acceptance="sampling", lossless_rate=None)
    assert sampled.status == "ok" and sampled.lossless == "sampled, retention 1.00 [0.90, 1.10]"
    images = judged(lossless_rule=False, retention=None, fid_retention=0.8, retention_low=None)
    assert images.lossless == "lossy, retention 0.80"
    assert judged(registry_method="ar", temperature=1.0).lossless == "AR, sampled"


def test_a_cell_that_ran_on_the_cpu_fails_where_a_gpu_is_visible():
    on_cpu = {"device": "cpu:x86_64:1threads"}
    assert judged(**on_cpu).status == "FAIL" and "not on the GPU" in judged(**on_cpu).why
    assert judged(expect_cuda=False, **on_cpu).status == "ok"
    assert judged(tau=None).status == "FAIL"


SNAKEMAKE_LOG = """\
[Fri Nov 27 16:44:21 2026]
Error in rule generate:
    message: None
    jobid: 25
    input: results/prepared/toy_caption.parquet
    output: results/generate/dataset=toy_caption/pair=bad/method=sd/hp=default/seed=0/samples.parquet
    log: logs/generate/dataset=toy_caption/pair=bad/method=sd/hp=default/seed=0.log (check log file(s) for error details)
    shell:
        mmspec generate ...
        (command exited with non-zero exit code)
Error in rule toy_model:
    jobid: 3
    output: results/models/toy/target
    log: logs/toy_model/target.log (check log file(s) for error details)
Exiting because a job execution failed. Look above for error messages
"""  # noqa: E501


def test_failed_jobs_are_read_from_snakemakes_error_blocks():
    jobs = failed_jobs(SNAKEMAKE_LOG)
    assert [(j.rule, j.outputs, j.log) for j in jobs] == [
        (
            "generate",
            ["results/generate/dataset=toy_caption/pair=bad/method=sd/hp=default/seed=0/"
             "samples.parquet"],
            "logs/generate/dataset=toy_caption/pair=bad/method=sd/hp=default/seed=0.log",
        ),
        ("toy_model", ["results/models/toy/target"], "logs/toy_model/target.log"),
    ]  # fmt: skip


def test_a_workflow_that_stopped_before_any_job_leaves_every_cell_not_run(tmp_path):
    sweep = mmconfig.load(ROOT / "tests" / "configs" / "tiny.yaml")
    log = "LockException:\nError: Directory cannot be locked. Please make sure ...\n"
    rows = cell_rows(tmp_path, sweep, 1, log, expect_cuda=False)
    assert [r.status for r in rows] == ["NOT RUN"] * len(mmcells.cells(sweep)) + ["FAILED"]
    assert rows[-1].cell == "workflow" and "--unlock" in rows[-1].why


def _decoded(gaps):
    decoded = Decoded(gaps=list(gaps))
    decoded.seconds = {"ar": 1.0, "sd": 0.5, "verify": 0.2}
    decoded.tokens, decoded.steps = {"ar": 10, "sd": 10}, {"ar": 10, "sd": 4}
    decoded.draft_forwards, decoded.draft_s = 12, 0.12
    return decoded


def test_a_dtype_row_tells_rounding_at_near_ties_from_real_differences():
    dtype = torch.bfloat16
    logits = [torch.tensor([1.0, 0.5, 0.25]), torch.tensor([2.0, 2.0 - 0.0078125, 0.0])]
    ar = [0, 0]
    assert divergence(ar, [0, 0], logits, dtype) == 0.0
    # at 2.0 one bfloat16 unit is 2**-6: the rival one unit below is a near-tie
    assert divergence(ar, [0, 1], logits, dtype) == pytest.approx(0.5)
    assert divergence(ar, [1, 0], logits, dtype) == pytest.approx(64.0)
    assert divergence(ar, [0], logits, dtype) == math.inf  # stopped early

    row = dtype_row("d", _decoded([0.0, 0.0, 0.5]), tie_ulps=4)
    assert row.status == "ok" and row.lossless == "2/3 ==AR, 1 at ties (<= 0.5 ulp)"
    # tau 10 tokens / 4 steps; AR 0.1 s per token, SD 0.05 s; T_p 0.1 s, a verification 0.05 s
    assert row.tau == 2.5 and row.speedup == 2.0 and row.verify_cost == pytest.approx(0.5)
    # c = 0.01 s / 0.1 s, k = 3 draft forwards per step: Eq. 1 = 2.5 / (3 * 0.1 + 1)
    assert row.eq1_ratio == pytest.approx(2.0 / (2.5 / 1.3))
    real = dtype_row("d", _decoded([0.0, 64.0, 0.5]), tie_ulps=4)
    assert real.status == "FAIL" and "1 differ" in real.lossless and "64.0" in real.why
    flaky = _decoded([0.0])
    flaky.ar_repeatable = False
    assert dtype_row("d", flaky, tie_ulps=4).status == "FAIL"


# ---------------------------------------------------------------------------------------------
# the sampled cells


def test_the_check_adds_a_sampled_cell_of_every_family_to_the_tour():
    tour = mmcells.cells(mmconfig.load_as_snakemake(ROOT / "config" / "config.yaml"))
    swept = sweep_config(gpu_check.TOUR, gpu_check.SAMPLED)
    cells = mmcells.cells(mmconfig.validate(swept, overrides={}))
    keys = [(c.dataset, c.pair, c.method, c.hp) for c in cells]
    assert keys[: len(tour)] == [(c.dataset, c.pair, c.method, c.hp) for c in tour]
    added = cells[len(tour) :]
    assert all(c.spec.temperature == 1.0 for c in added)
    families = {c.spec.method for c in added}
    assert families == {
        "ar", "sd_chain", "sd_tree", "eagle2_tree", "sage_tree", "specvlm", "tabed_mt",
        "random_mt", "lvspec", "fly", "random_relax", "eagle2", "dream", "medusa", "hydra",
        "kangaroo", "lantern_eagle",
    }  # fmt: skip
    # a lossless rule samples by rejection sampling; a lossy one keeps its own rule
    for cell in (c for c in added if not c.spec.is_ar):
        rule = cell.spec.acceptance
        assert rule == "sampling" or not is_lossless(rule), cell.method
    # EAGLE's and DREAM's heads are the tour's (the same trained-head folders); Medusa, Hydra and
    # Kangaroo train briefly on a small set
    reused = {mmcells.drafter_dir(c) for c in added if c.spec.drafter in ("eagle", "dream")}
    assert len(reused) == 3 and reused <= {mmcells.drafter_dir(c) for c in tour}
    brief = [c for c in added if c.spec.drafter in ("medusa", "hydra", "kangaroo")]
    assert len(brief) == 3 and all(c.spec.params["head_steps"] == 100 for c in brief)


def test_a_rule_that_names_no_methods_keeps_its_own_methods_when_sampled_ones_join():
    base = {"datasets": {"d": {}}, "pairs": {"p": {}}, "methods": {"ar": {}, "sd": {}}}
    assert explicit_rules(base) == [{"datasets": ["d"], "pairs": ["p"], "methods": ["ar", "sd"]}]
    rules = explicit_rules({**base, "sweep": [{"datasets": ["d"], "methods": "all"}]})
    assert rules == [{"datasets": ["d"], "pairs": ["p"], "methods": ["ar", "sd"]}]


# ---------------------------------------------------------------------------------------------
# the command, on the CPU


def _table(folder) -> dict[str, list[str]]:
    """cell -> the other columns of the Markdown table the check wrote."""
    lines = (folder / "gpu_check" / "table.md").read_text().splitlines()
    rows = [[v.strip() for v in line.strip("|").split("|")] for line in lines if line[:2] == "| "]
    assert rows[0] == list(gpu_check.COLUMNS)
    return {row[0]: row[1:] for row in rows[1:]}


def _check(out, *args):
    cmd = [sys.executable, "-m", "mmspec.gpu_check", "--quick", "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_the_quick_check_fails_on_a_failing_cell_and_passes_without_it(tmp_path, tiny_run):
    from mmspec.toy import tiny

    # a draft of another family: its tokenizer differs, so the SD cell's generate job fails
    foreign = tiny.save("qwen2_5_vl", tmp_path / "foreign", layers=1, seed=1)
    sampled = yaml.safe_load(gpu_check.QUICK_SAMPLED.read_text())
    sampled["pairs"] = {"foreign": {"target": "toy:target", "draft": str(foreign)}}
    sampled["methods"]["sd_text"] = {"method": "sd", "views": "T", "gamma": 2}
    sampled["sweep"].append({"datasets": ["toy_caption"], "pairs": ["foreign"],
                             "methods": ["ar", "sd_text"]})  # fmt: skip
    (tmp_path / "sampled.yaml").write_text(yaml.safe_dump(sampled))
    # The quick check's base sweep is tests/configs/tiny.yaml, whose cells the shared `tiny_run`
    # ran end to end: the check starts from a copy of that folder (Snakemake's records
    # included), so its workflow runs only the cells and stages the check adds, as a rerun of a
    # finished sweep does. Every cell is still read and judged by the check.
    out = tmp_path / "run"
    shutil.copytree(tiny_run, out, symlinks=True)

    failing = _check(out, "--sampled", str(tmp_path / "sampled.yaml"))
    assert failing.returncode == 1, failing.stdout[-3000:] + failing.stderr[-3000:]
    swept = sweep_config(gpu_check.QUICK_CONFIG, tmp_path / "sampled.yaml")
    cells = mmcells.cells(mmconfig.validate(swept, overrides={}))
    rows = _table(out)
    # a row per cell (the grid of `sd`, views M and T, with its hyperparameters), 3 benchmark
    # rows, 12 dtype rows (2 families x 2 dtypes x 3 methods)
    assert len(cells) == 14
    grid = {("toy_caption", "toy", "sd")}
    assert [n for n in rows if n.startswith("toy_caption/")] == [cell_name(c, grid) for c in cells]
    bad = rows.pop("toy_caption/foreign/sd_text")
    assert bad[0] == "FAILED generate"
    assert (
        "FAIL toy_caption/foreign/sd_text: FAILED generate: mmspec generate: error: pair foreign"
        in failing.stdout
    )
    assert all(row[0] == "ok" for row in rows.values()), rows
    assert sum(name.startswith("bench: ") for name in rows) == 3
    assert sum(name.startswith("dtype ") for name in rows) == 12
    # the cells that ran have their numbers (aggregated by the check: the summary never ran)
    greedy = rows["toy_caption/toy/sd gamma-2_views-M seed 0"]
    assert greedy[1] == "1.000" and float(greedy[2]) >= 1 and float(greedy[3]) > 0
    assert rows["toy_caption/toy/sd_sampling"][1].startswith("sampled")
    assert rows["toy_caption/toy/lvspec"][1].startswith("lossy")

    # the same folder without the failing cell: the workflow reuses every finished job
    # (the benchmark and dtype rows, checked above, are not the workflow's: skipped)
    passing = _check(out, "--skip", "dtypes", "--skip", "bench")
    assert passing.returncode == 0, passing.stdout[-3000:] + passing.stderr[-3000:]
    rows = _table(out)
    assert "toy_caption/foreign/sd_text" not in rows and len(rows) == 12
    assert all(row[0] == "ok" for row in rows.values()), rows
    assert "result: all 12 passed" in passing.stdout
