"""The workflow through a real Slurm, with the repository's `slurm/` profile, end to end.

When the session collects the test, conftest.py starts, in a background thread, a single-node
Slurm on this machine (tests/slurm/start_slurm.sh: munge, MariaDB + slurmdbd, slurmctld, slurmd,
two fake GPUs) and then runs, from the repository root, what a user runs on a cluster:

    snakemake --cores all --profile slurm --directory <tmp> --configfile tests/configs/tiny.yaml

The run mostly waits on Slurm, so the other tests use the machine meanwhile. The test waits
for the run's end and checks that every non-local job went through sbatch (slurmdbd has a job
per rule of this run, all COMPLETED), that the GPU rules asked for a GPU and the CPU rules did
not, and that the outputs are complete. The profile itself is used unchanged; the only command-line
additions are test-only switches (no retries, short latency wait, keep the Slurm logs).

Needs root to install and start Slurm (CI runs as root). As a non-root user it only runs
when a Slurm with slurmdbd is already reachable, otherwise it is skipped with the reason.
Environment: MMSPEC_SLURM_DIR (scratch folder of the local Slurm), MMSPEC_SLURM_KEEP=1 to
leave the Slurm the session started running afterwards (faster reruns).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
SLURM_SCRIPTS = REPO / "tests" / "slurm"
SLURM_DIR = Path(os.environ.get("MMSPEC_SLURM_DIR", "/tmp/mmspec-slurm"))
SLURM_CONF = SLURM_DIR / "etc" / "slurm.conf"
GPU_RULES = {"cache_visual", "caption", "generate"}
SNAKEMAKE_TIMEOUT_S = 900
# Test-only switches; everything else comes from slurm/config.yaml as for a user.
#   --retries 0: a failure shows at once, not masked by a retry
#   --latency-wait 5: local disk, so a missing output is a real error
#   --slurm-keep-successful-logs: the per-job Slurm logs stay, checked below and shown on failure
#   --slurm-init-seconds-before-status-checks 3: the tiny jobs take seconds, and the chain of
#     rules waits for a status check after each (the profile's 10 s suits real jobs)
TEST_ARGS = ["--retries", "0", "--latency-wait", "5", "--slurm-keep-successful-logs"]
TEST_ARGS += ["--slurm-init-seconds-before-status-checks", "3"]


def _slurm_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = str(SLURM_CONF)
    env["HF_HUB_OFFLINE"] = "1"
    # jobs run with `--export=ALL`: make this interpreter's environment the one they see
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, "/usr/sbin", env.get("PATH", "")])
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[key]  # never inherit an enclosing job's context
    return env


def _slurm_up(env) -> bool:
    if not shutil.which("scontrol") or not shutil.which("sacct"):
        return False
    ping = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
    acct = subprocess.run(["sacct", "-n", "-X", "-S", "now-1minutes"], env=env, capture_output=True)
    return ping.returncode == 0 and "UP" in ping.stdout and acct.returncode == 0


def _start_cluster(env) -> dict:
    """Start the local Slurm (tests/slurm/start_slurm.sh); {"skip": reason} where it cannot."""
    already_up = SLURM_CONF.exists() and _slurm_up(env)
    if os.geteuid() != 0 and not already_up:
        return {"skip": "needs root to install and start a local Slurm (CI runs the suite as root)"}
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SLURM_SCRIPTS / "start_slurm.sh")], env=env, capture_output=True, text=True
    )
    start = {"already_up": already_up, "start_s": time.monotonic() - t0, "log": proc.stdout}
    if proc.returncode != 0:
        start["error"] = f"start_slurm.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return start


def _run_through_slurm(workdir: Path) -> dict:
    """Start Slurm, then run what a user runs on a cluster, from the repository root (+ the
    test-only switches); the test reads the outcome."""
    env = _slurm_env()
    run = {"env": env, "workdir": workdir, **_start_cluster(env)}
    if "skip" in run or "error" in run:
        return run
    cmd = [sys.executable, "-m", "snakemake", "--cores", "all", "--profile", "slurm"]
    cmd += ["--directory", str(workdir), "--configfile", "tests/configs/tiny.yaml", *TEST_ARGS]
    workdir.mkdir(parents=True, exist_ok=True)
    run["rc"], run["output"], run["run_s"] = _run_snakemake(
        cmd, env, workdir.parent / "snakemake.log"
    )
    return run


# The run through Slurm spends most of its time waiting (submission, status polls, job starts),
# so it starts in the background when the session collects this test (conftest.py calls
# `start`) and the other tests use the machine meanwhile; the test waits for it and checks it.
_background: dict = {}


def start(tmp_root: Path) -> None:
    """Begin the run through Slurm in a background thread (once per session)."""
    if "future" not in _background:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurm-run")
        _background["future"] = executor.submit(_run_through_slurm, tmp_root / "run")
        executor.shutdown(wait=False)


def stop() -> None:
    """End of session: stop the Slurm this session started (unless MMSPEC_SLURM_KEEP=1)."""
    future = _background.pop("future", None)
    if future is None or not future.done():
        return
    run = future.result()
    if "start_s" in run and not run["already_up"] and os.environ.get("MMSPEC_SLURM_KEEP") != "1":
        subprocess.run(["bash", str(SLURM_SCRIPTS / "stop_slurm.sh")], env=run["env"], check=False)


@pytest.fixture(scope="session")
def slurm_run(tmp_path_factory):
    """The outcome of the run through Slurm (started in the background, or now)."""
    if "future" not in _background:  # e.g. collected without conftest's hook
        start(tmp_path_factory.mktemp("slurm"))
    run = _background["future"].result()
    if "skip" in run:
        pytest.skip(run["skip"])
    assert "error" not in run, run["error"]
    return run


def _run_snakemake(cmd, env, log_path: Path) -> tuple[int, str, float]:
    """Run Snakemake in its own process group; on timeout kill that group (the Slurm
    plugin can ignore SIGTERM while it waits on status queries)."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=SNAKEMAKE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -9
    return rc, log_path.read_text(), time.monotonic() - t0


def _sacct_jobs(run_id: str, env) -> list[dict[str, str]]:
    keys = ["jobid", "comment", "state", "reqtres", "exitcode", "timelimit"]
    fields = "JobIDRaw,Comment,State,ReqTRES,ExitCode,TimelimitRaw"
    cmd = ["sacct", "-X", "-P", "-n", "-S", "now-1days", "-E", "now"]
    cmd += ["--name", run_id, "-o", fields]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line]


def _diagnostics(workdir: Path, output: str) -> str:
    parts = ["---- snakemake output (tail) ----", output[-8000:]]
    for log in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))[-6:]:
        parts += [f"---- {log.relative_to(workdir)} (tail) ----", log.read_text()[-2000:]]
    ctld = SLURM_DIR / "log" / "slurmctld.log"
    if ctld.exists():
        parts += ["---- slurmctld.log (tail) ----", "\n".join(ctld.read_text().splitlines()[-30:])]
    return "\n".join(parts)


def test_workflow_through_slurm(slurm_run):
    env, workdir = slurm_run["env"], slurm_run["workdir"]
    rc, output, run_s = slurm_run["rc"], slurm_run["output"], slurm_run["run_s"]
    print(f"slurm start {slurm_run['start_s']:.1f} s, snakemake through slurm {run_s:.1f} s")
    diag = _diagnostics(workdir, output)
    assert rc == 0, f"snakemake exited {rc} after {run_s:.0f} s\n{diag}"

    # the profile was the one used, with the slurm executor
    assert re.search(r"Using profiles? slurm\b", output), diag  # (+ the workflow profile)
    m = re.search(r"SLURM run ID: (\S+)", output)
    assert m, f"no 'SLURM run ID' line: not run by the slurm executor?\n{diag}"
    run_id = m.group(1)

    # every rule Snakemake ran as a cluster job ("rule X:", not "localrule X:") was submitted
    # through sbatch: slurmdbd knows a job of this run for it, and all of them COMPLETED. The
    # profile packs the generate jobs into group jobs ("cells", up to 8 cells each), one after
    # another on one GPU
    cluster_rules = set(re.findall(r"^\s*rule (\w+):$", output, flags=re.M))  # (in groups too)
    n_submitted = len(re.findall(r"has been submitted with SLURM jobid", output))
    # generate jobs are batches of cells (one per dataset, pair, method and seed here)
    n_batches = int(re.search(r"^generate\s+(\d+)", output, flags=re.M).group(1))
    jobs = _sacct_jobs(run_id, env)
    # the plugin sets --comment rule_<rule or group> or rule_<rule>_wildcards_<values>
    job_rule = {j["jobid"]: re.sub(r"^rule_|_wildcards_.*$", "", j["comment"]) for j in jobs}
    assert GPU_RULES <= cluster_rules, f"GPU rules not run as cluster jobs: {cluster_rules}\n{diag}"
    # a group job is named after its group and rules: cells_generate; an AR cell's generate job
    # is a job of its own (its method cells read its samples)
    submitted_as = cluster_rules | {"cells_generate"}
    assert set(job_rule.values()) == submitted_as, (
        f"rules of the sacct jobs {sorted(job_rule.values())} != {sorted(submitted_as)}\n{diag}"
    )
    cells = mmcells.cells(mmconfig.load(TINY))
    n_ar = sum(c.spec.method == "ar" for c in cells)
    assert len([j for j in jobs if job_rule[j["jobid"]] == "generate"]) == n_ar, diag
    groups = [j for j in jobs if job_rule[j["jobid"]] == "cells_generate"]
    n_method = n_batches - n_ar
    assert 1 < n_method and len(groups) == -(-n_method // 8), f"{n_method} in {groups}\n{diag}"
    # in series: a group asks for its batches' runtimes summed (60 minutes each in the profile)
    assert sum(int(j["timelimit"]) for j in groups) == 60 * n_method, f"{groups}\n{diag}"
    # a group's cells ran on one warm worker, which loaded their shared models once
    logs = list((workdir / "logs" / "generate").rglob("*.log"))
    worker_lines = {
        p: re.search(r"^mmspec: warm worker (\d+), its job (\d+);", p.read_text(), flags=re.M)
        for p in logs
    }
    assert all(worker_lines.values()), f"a generate job did not run on a warm worker\n{diag}"
    # the method cells of a group, one worker each (an AR cell's job has its own, or hands it on)
    method = [m[1] for p, m in worker_lines.items() if "method=ar" not in p.as_posix()]
    per_worker = collections.Counter(method).values()
    method_cells = len(cells) - n_ar
    assert len(method) == method_cells == sum(per_worker), f"{worker_lines}\n{diag}"
    assert len(per_worker) == len(groups), f"{worker_lines}\n{diag}"
    assert len(jobs) == n_submitted, f"{len(jobs)} jobs in sacct, {n_submitted} submitted\n{diag}"
    bad = [j for j in jobs if j["state"] != "COMPLETED"]
    assert not bad, f"jobs not COMPLETED: {bad}\n{diag}"

    # GPU rules asked Slurm for one GPU (`gpu: 1` in the profile -> sbatch --gpus=1), a group of
    # cells too (its cells run in series); the others none
    for j in jobs:
        rule = job_rule[j["jobid"]]
        if rule in GPU_RULES | {"cells_generate"}:
            assert "gres/gpu=1" in j["reqtres"], f"{rule} job without one GPU: {j}"
        else:
            assert "gres/gpu" not in j["reqtres"], f"CPU rule {rule} asked for a GPU: {j}"

    # the Slurm logs (one per job) in a folder per rule
    slurm_logs = workdir / ".snakemake" / "slurm_logs"
    log_rules = {p.name.removeprefix("rule_") for p in slurm_logs.glob("rule_*")}
    log_rules |= {p.name.removeprefix("group_") for p in slurm_logs.glob("group_*")}
    assert log_rules == submitted_as, f"slurm_logs folders {log_rules}\n{diag}"

    # outputs complete
    cells = workdir / "results" / "summary" / "cells.parquet"
    assert cells.is_file(), diag
    assert len(pd.read_parquet(cells)) > 0, "cells.parquet has no rows"
    assert (workdir / "reports" / "index.html").is_file(), diag


def test_search_rounds_through_slurm(slurm_run, tmp_path):
    """A searched entry's rounds run as they run locally: each round a local checkpoint job, its
    cells' batches submitted through sbatch as any cell's, the next round proposed from them."""
    env, done = slurm_run["env"], slurm_run["workdir"]
    assert slurm_run["rc"] == 0, "the tiny run through Slurm failed (see its test)"
    workdir = tmp_path / "search"
    shutil.copytree(done / "results", workdir / "results")  # its models, data and AR cells
    config = yaml.safe_load(TINY.read_text())
    config["methods"] = {
        "ar": {},
        "s": {
            "method": "sd",
            "gamma": {"low": 1, "high": 3},
            "views": ["M", "T"],
            "search": {"budget": 4, "per_round": 2},
        },
    }
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "all", "--profile", "slurm"]
    cmd += ["--directory", str(workdir), "--configfile", str(tmp_path / "search.yaml")]
    rc, output, _ = _run_snakemake([*cmd, *TEST_ARGS], env, tmp_path / "snakemake.log")
    diag = _diagnostics(workdir, output)
    assert rc == 0, diag
    rounds = workdir / "results" / "search" / "dataset=toy_caption" / "pair=toy" / "method=s"
    points = [json.loads((rounds / f"round-{r}.json").read_text())["points"] for r in (1, 2)]
    assert all(len(p) == 2 for p in points), points
    # the rounds ran where Snakemake runs; their cells as Slurm jobs, every one COMPLETED
    assert len(re.findall(r"^\s*localcheckpoint search_round:$", output, flags=re.M)) == 2, diag
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    jobs = _sacct_jobs(run_id, env)
    assert jobs and all(j["state"] == "COMPLETED" for j in jobs), f"{jobs}\n{diag}"
    for number in (1, 2):
        assert re.search(
            rf"batch=dataset=toy_caption/pair=toy/method=s/seed=0/round-{number}-", output
        ), diag
    cells = pd.read_parquet(workdir / "results" / "summary" / "cells.parquet")
    hps = set(cells.loc[cells["method"] == "s", "hp"])
    assert hps == {f"gamma-{p['gamma']}_views-{p['views']}" for r in points for p in r}, diag
