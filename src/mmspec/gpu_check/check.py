"""The check as a whole: the sweep validated, its parts run in order under one folder, one table."""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

from mmspec.gpu_check.bench import bench_rows
from mmspec.gpu_check.cells import cell_rows
from mmspec.gpu_check.dtypes import dtype_rows
from mmspec.gpu_check.report import report, write_atomic
from mmspec.gpu_check.settings import PARTS, REPO, Settings
from mmspec.gpu_check.sweep import sweep_config
from mmspec.gpu_check.workflow import run_workflow


def describe_device() -> tuple[str, bool]:
    """The GPU this process sees (or the CPU), and whether there is one."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})", True
    return f"CPU only: no GPU visible to torch {torch.__version__}", False


def run(out: str | Path, settings: Settings | None = None, echo=print) -> int:
    """Run the check's parts under `out`; print and write (out/gpu_check/table.md) the table;
    0 when every row passes, else 1."""
    import yaml

    from mmspec.sweep import config as mmconfig

    settings = settings or Settings()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers: nothing downloads
    unknown = set(settings.parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)} (known: {', '.join(PARTS)})")
    if not (REPO / "Snakefile").exists():  # an installed copy without the workflow
        raise FileNotFoundError(
            f"{REPO}: no Snakefile; run the check from a clone (pip install -e .)"
        )
    config = sweep_config(Path(settings.config), settings.sampled and Path(settings.sampled))
    sweep = mmconfig.validate(copy.deepcopy(config), overrides={})  # before any job
    out = Path(out).resolve()
    folder = out / "gpu_check"
    folder.mkdir(parents=True, exist_ok=True)
    configfile = folder / "config.yaml"
    write_atomic(configfile, yaml.safe_dump(config, sort_keys=False))
    device, cuda = describe_device()
    echo(f"gpu-check: {device}; results under {out}")
    rows, timings = [], []
    for part in (p for p in PARTS if p in settings.parts):
        started = time.perf_counter()
        echo(f"gpu-check: {part} ...")
        if part == "workflow":
            log = folder / "workflow.log"
            status = run_workflow(out, configfile, settings.cores, log, echo)
            rows += cell_rows(out, sweep, status, log.read_text(), cuda)
        elif part == "bench":
            rows += bench_rows(out, sweep, settings, echo)
        else:
            rows += dtype_rows(folder / "dtypes", settings, echo)
        timings.append(f"{part} {time.perf_counter() - started:.0f} s")
    return report(rows, [f"device: {device}", f"time: {', '.join(timings)}"], folder, echo)
