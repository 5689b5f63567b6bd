"""Timing helpers: synchronise the accelerator around timed regions, record versions."""

from __future__ import annotations

import importlib.metadata
import json
import platform

from mmspec.decoding.lazy import torch


def sync(device: torch.device) -> None:
    """Wait for queued kernels so perf_counter brackets the real work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()}:{torch.get_num_threads()}threads"


def versions() -> str:
    """JSON of the versions that affect timings and outputs."""
    names = ["torch", "transformers", "tokenizers", "mmspec"]
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return json.dumps(out, sort_keys=True)
