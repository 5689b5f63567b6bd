"""What a sweep reads from the Hugging Face Hub (fetched by `mmspec fetch`, `hub.cache`) and
from local paths: the models its cells load (targets, drafts, the captioner, FID's and CLIP's
networks), the datasets they read or train heads on, and their video folders. Toy models are the
workflow's own and are neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mmspec.data import hf_spec
from mmspec.data import source as dataset_source
from mmspec.data.hf_source import HuggingFaceDatasets
from mmspec.hub import cache as hub_cache
from mmspec.hub.cache import DATASET, MODEL, HubRepo
from mmspec.hub.refs import is_local
from mmspec.models import source as model_source
from mmspec.sweep import cell_inputs
from mmspec.sweep import cells as mmcells


@dataclass(frozen=True)
class LocalPath:
    """A local folder a sweep reads (a model folder, a dataset folder, a video folder)."""

    path: str
    uses: tuple[str, ...]

    def exists(self) -> bool:
        return Path(os.path.expanduser(self.path)).exists()


def _model_uses(config: dict, swept: list) -> dict[str, list[str]]:
    """model reference -> the config keys of the models the swept cells load."""
    uses: dict[str, list[str]] = {}

    def use(ref: str, key: str) -> None:
        keys = uses.setdefault(ref, [])
        if key not in keys:
            keys.append(key)

    for cell in swept:
        pair = config["pairs"][cell.pair]
        for ref, _ in cell.spec.loaded_models(pair):
            use(ref, f"pairs.{cell.pair}.{'target' if ref == pair['target'] else 'draft'}")
    captioner = config.get("captioner")
    if captioner and any(cell_inputs.needs_captions(config, c) for c in swept):
        use(captioner["model"], "captioner.model")
    if any(cell_inputs.makes_images(config, c.dataset) for c in swept):
        for key in ("fid_features", "clip"):
            use(config["image_metrics"][key], f"image_metrics.{key}")
    return uses


def needed(config: dict, swept: list | None = None) -> tuple[list[HubRepo], list[LocalPath]]:
    """The hub repositories a validated config's cells (`swept`, else all its cells) read,
    and the local paths they read."""
    swept = mmcells.cells(config) if swept is None else swept
    uses: dict[HubRepo, list[str]] = {}  # a repository (and dataset config) -> its config keys
    local: list[LocalPath] = []
    for ref, keys in _model_uses(config, swept).items():
        source = model_source.of(ref).name
        if source == "hub":
            uses[HubRepo(MODEL, ref)] = keys
        elif source == "local":
            local.append(LocalPath(ref, tuple(keys)))
    for name in cell_inputs.datasets_read(swept):
        if dataset_source.of(config["datasets"][name]).kind != HuggingFaceDatasets.kind:
            continue
        entry = hf_spec.parse_entry(config["datasets"][name])
        key = f"datasets.{name}"
        if is_local(entry.id):
            local.append(LocalPath(entry.id, (f"{key}.id",)))
        else:  # two entries of one repository and config: one download
            repo = HubRepo(DATASET, entry.id, entry.config)
            uses.setdefault(repo, []).append(f"{key}.id")
        if entry.video is not None and entry.video.dir:
            local.append(LocalPath(entry.video.dir, (f"{key}.video.dir",)))
    repos = [HubRepo(r.kind, r.repo_id, r.config, tuple(keys)) for r, keys in uses.items()]
    return repos, local


def jobs_offline(local_execution: bool, environ=os.environ) -> bool:
    """Whether the jobs read hub repositories from the cache only: as HF_HUB_OFFLINE says when
    set; else under a cluster executor (compute nodes often cannot reach the Hub)."""
    value = environ.get("HF_HUB_OFFLINE")
    if value is None:
        return not local_execution
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def before_jobs(config: dict, swept: list, local_execution: bool, configs: str) -> None:
    """At the start of a run: when its jobs read the cache only (`jobs_offline`), set
    HF_HUB_OFFLINE=1 for them (a cluster executor hands this environment to each job) and
    check that the cache holds every hub repository they read (`check_fetched`)."""
    if not jobs_offline(local_execution):
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    check_fetched(config, swept, configs)


def check_fetched(config: dict, swept: list | None = None, configs: str = "CONFIG") -> None:
    """ValueError naming every hub repository the cells read that the cache lacks (or holds in
    part), and the command that fetches them (`configs`: how the run named its config files)."""
    repos, _ = needed(config, swept)
    problems = hub_cache.missing(repos)
    if not problems:
        return
    lines = [f"  {repo.describe()} ({', '.join(repo.uses)}): {why}" for repo, why in problems]
    raise ValueError(
        f"the jobs read hub models and datasets from the Hugging Face cache only "
        f"(HF_HUB_OFFLINE), where {len(problems)} of them are missing or incomplete:\n"
        + "\n".join(lines)
        + "\nFetch them first, on a host that reaches the Hub, into the HF_HOME the nodes "
        f"share: HF_HUB_OFFLINE=0 mmspec fetch {configs}"
    )


def render(listings: list, local: list[LocalPath]) -> str:
    """The fetch listing: each hub repository (files, bytes, what is cached, the config keys
    naming it) and each local path (whether it exists)."""
    total = sum(found.size for found in listings)
    to_fetch = sum(found.to_fetch for found in listings)
    size = hub_cache.size_text
    lines = [
        f"hub repositories: {len(listings)}, {size(total)} ({size(to_fetch)} not yet in "
        f"{hub_cache.cache_dir()})"
    ]
    for found in listings:
        state = "cached" if not found.to_fetch else f"{size(found.to_fetch)} to fetch"
        lines.append(
            f"  {found.repo.describe()}: {len(found.files)} files, {size(found.size)}, {state}"
            f"  [{', '.join(found.repo.uses)}]"
        )
    lines.extend(_local_lines(local))
    return "\n".join(lines)


def render_offline(repos: list[HubRepo], local: list[LocalPath]) -> str:
    """What `mmspec fetch` can say without the Hub: each repository and what the cache holds
    of it (sizes need the Hub), and each local path."""
    problems = dict(hub_cache.missing(repos))
    lines = [
        f"hub repositories: {len(repos)} (HF_HUB_OFFLINE is set: what {hub_cache.cache_dir()} "
        "holds of them; their sizes need the Hub)"
    ]
    for repo in repos:
        state = problems.get(repo, "cached")
        lines.append(f"  {repo.describe()}: {state}  [{', '.join(repo.uses)}]")
    lines.extend(_local_lines(local))
    return "\n".join(lines)


def _local_lines(local: list[LocalPath]) -> list[str]:
    if not local:
        return []
    lines = [f"local paths: {len(local)} (not the Hub's; fetch does not copy them)"]
    for path in local:
        state = "present" if path.exists() else "MISSING"
        lines.append(f"  {path.path}: {state}  [{', '.join(path.uses)}]")
    return lines
