"""Part 1, the workflow: one Snakemake run of the sweep, and the jobs its log reports failed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mmspec.gpu_check.settings import REPO


@dataclass
class FailedJob:
    rule: str
    outputs: list[str]
    log: str


def failed_jobs(log: str) -> list[FailedJob]:
    """The jobs a Snakemake log reports as failed ("Error in rule ...:" blocks)."""
    jobs = []
    for match in re.finditer(r"^Error in rule (\w+):\n((?:[ \t]+.*\n?)+)", log, re.M):
        block = match[2]
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        logs = re.search(r"^\s+log: (\S+)", block, re.M)
        jobs.append(
            FailedJob(
                match[1],
                [o.strip() for o in outputs[1].split(",")] if outputs else [],
                logs[1] if logs else "",
            )
        )
    return jobs


def run_workflow(out: Path, configfile: Path, cores: str, log: Path, echo) -> int:
    """Snakemake over the repository's Snakefile in `out`; its output goes to `log`, its
    progress and errors are echoed; its exit status."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", cores]
    cmd += ["--directory", str(out), "--configfile", str(configfile), "--keep-going"]
    if importlib.util.find_spec("pulp") is None:  # the ILP scheduler's solver is optional
        cmd += ["--scheduler", "greedy"]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    # the rules run `mmspec <stage>`: this interpreter's scripts first, as in its environment
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    with open(log, "w") as f:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        tenths = -1
        for line in proc.stdout:
            f.write(line)
            steps = re.match(r"(\d+) of (\d+) steps", line)
            if steps:  # progress every tenth of the jobs
                done = 10 * int(steps[1]) // int(steps[2])
                if done == tenths:
                    continue
                tenths = done
            if steps or line.startswith("Error in rule"):
                echo(f"  workflow: {line.rstrip()}")
        return proc.wait()


def unlock_command(out: Path) -> str:
    """What unlocks `out` after a killed run."""
    return (
        f"python -m snakemake -s {REPO / 'Snakefile'} --directory {out} --configfile "
        f"{out / 'gpu_check' / 'config.yaml'} --unlock"
    )


def tail(text: str, lines: int = 3) -> str:
    """The last lines of a log, on one line."""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
