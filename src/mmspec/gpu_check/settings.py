"""What the check runs: its parts, the sweeps it merges, and the options of its smoke run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mmspec.scoring import lossless

# The workflow part runs the repository's Snakefile on its configs: the check runs from a clone
REPO = Path(__file__).resolve().parents[3]
TOUR = REPO / "config" / "config.yaml"
SAMPLED = REPO / "config" / "gpu_check.yaml"
# --quick: the check's own smoke run, on the tiny sweep the workflow tests run
QUICK_CONFIG = REPO / "tests" / "configs" / "tiny.yaml"
QUICK_SAMPLED = REPO / "config" / "gpu_check_quick.yaml"
PARTS = ("workflow", "bench", "dtypes")

# A flip counts as rounding when SD's token lies within this many units in the last place of
# AR's best logit at that step (the sweep's own rule for bf16 and fp16, scoring.lossless)
TIE_ULPS = lossless.TIE_ULPS["bfloat16"]


@dataclass
class Settings:
    """What the check runs; `quick()` is its smoke run on the tiny sweep."""

    config: Path = TOUR  # a whole sweep, or an override of the tour
    sampled: Path | None = SAMPLED  # merged in, its sweep rules appended
    cores: str = "all"
    parts: tuple[str, ...] = PARTS
    bench_samples: int = 20
    bench_max_new: int = 48
    bench_warmup: int = 2
    dtype_samples: int = 12
    dtype_max_new: int = 24
    tie_ulps: float = TIE_ULPS

    @classmethod
    def quick(cls) -> Settings:
        small = dict(bench_samples=3, bench_max_new=12, bench_warmup=1, dtype_samples=3)
        return cls(config=QUICK_CONFIG, sampled=QUICK_SAMPLED, **small)
