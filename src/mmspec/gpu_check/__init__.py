"""`mmspec gpu-check`: one command that checks a machine with a GPU end to end (docs/gpu-check.md).

Three parts, one table (`check.run`):
  workflow  the tour (config/config.yaml) and one sampled cell of every method family
            (config/gpu_check.yaml) in one Snakemake run under --out; `--keep-going`, so a
            failed job stops only the cells that need it (`workflow`, `cells`)
  bench     the engine benchmark (`mmspec.bench.engine`) on the sweep's trained toy pair: mmspec
            AR against HF greedy `generate`, mmspec chain SD against HF assisted generation,
            token for token (`bench`)
  dtypes    bfloat16 and float16 greedy SD against AR on tiny random models of two families
            (LLaVA, Qwen2.5-VL), through the generate stage's own loading and prompts (`dtypes`,
            `dtype_verdict`)

Exit status 1 on any failure. The command line is `arguments`; what a row holds, `row`; the
table printed and written, `report`.
"""

from mmspec.gpu_check.arguments import add_arguments, from_args, main
from mmspec.gpu_check.check import run
from mmspec.gpu_check.row import COLUMNS, Row
from mmspec.gpu_check.settings import (
    PARTS,
    QUICK_CONFIG,
    QUICK_SAMPLED,
    REPO,
    SAMPLED,
    TOUR,
    Settings,
)

__all__ = [
    "COLUMNS",
    "PARTS",
    "QUICK_CONFIG",
    "QUICK_SAMPLED",
    "REPO",
    "SAMPLED",
    "TOUR",
    "Row",
    "Settings",
    "add_arguments",
    "from_args",
    "main",
    "run",
]
