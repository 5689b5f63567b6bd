"""The Hugging Face cache of a sweep's hub repositories: which files of a repository the jobs
read, listing and fetching them, and what the cache lacks.

Compute nodes often cannot reach the Hub. `mmspec fetch CONFIG` lists every hub model and hub
dataset the config's cells load (`hub_needs`), with the files and bytes each needs, and
downloads them into the cache (`HF_HOME`) on the submitting host; jobs then read them with
`HF_HUB_OFFLINE=1`. Under a cluster executor (or with `HF_HUB_OFFLINE=1` set) the workflow
checks the cache before any job (`missing`) and names what was not fetched.

What "needed" means, the same online and offline:
- a model: every file of its newest revision but the weights of other frameworks (Flax, TF,
  ONNX, GGUF, ...), and, when it ships safetensors, its PyTorch pickles (`*.bin`, `*.pth`);
- a dataset: its card (README.md) and the data files of the config the entry names, as the
  card's `configs:` declares them (every split of that config: `datasets` prepares them all),
  or the whole repository when the card declares none. A prepared dataset is read from those
  files (`dataset_folder`), so a fetched dataset and a downloaded one are read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

MODEL = "model"
DATASET = "dataset"
CARD = "README.md"
# weights `from_pretrained` does not read into torch
OTHER_FRAMEWORKS = (
    "*.msgpack",
    "*.h5",
    "*.ot",
    "*.onnx",
    "*.onnx_data",
    "*.tflite",
    "*.gguf",
    "*.mlmodel",
    "*.mlpackage/*",
    "*.nemo",
)
PICKLED_WEIGHTS = ("*.bin", "*.pth", "*.pt", "*.ckpt")
SAFETENSORS = ".safetensors"


@dataclass(frozen=True)
class HubRepo:
    """A hub repository a sweep reads: `kind` MODEL or DATASET; `config`: a dataset's config
    name (it decides which data files are read); `uses`: the config keys naming it."""

    kind: str
    repo_id: str
    config: str | None = None
    uses: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        config = f" (config {self.config})" if self.config else ""
        return f"{self.kind} {self.repo_id}{config}"


# --- which files of a repository are read ------------------------------------------------


def model_ignored(files: list[str]) -> list[str]:
    """The patterns of a model's files that no job reads, given its file list."""
    if any(f.endswith(SAFETENSORS) for f in files):
        return [*OTHER_FRAMEWORKS, *PICKLED_WEIGHTS]
    return list(OTHER_FRAMEWORKS)


def dataset_patterns(card: str | None, config: str | None, repo_id: str) -> list[str] | None:
    """The file patterns of a dataset config's data files (every split), from its card's
    `configs:`; None (the whole repository) when the card declares no configs. A config the card
    does not declare is a ValueError naming those it does."""
    declared = _card_configs(card)
    if not declared:
        if config not in (None, "default"):
            raise ValueError(
                f"hub dataset {repo_id}: config {config!r} is not declared in its card "
                "(README.md `configs:`), and the card declares none"
            )
        return None
    chosen = _choose_config(declared, config)
    if chosen is None:
        names = [c.get("config_name", "default") for c in declared]
        raise ValueError(
            f"hub dataset {repo_id}: its card declares the configs {names}, not {config!r} "
            f"(set `config:` of its entry to one of them)"
        )
    base = (chosen.get("data_dir") or "").strip("/")
    patterns = [CARD]
    for pattern in _data_file_patterns(chosen.get("data_files")):
        patterns.append(f"{base}/{pattern}" if base else pattern)
    if len(patterns) == 1:  # no data_files: datasets reads the data_dir, or the repository
        patterns.append(f"{base}/*" if base else "*")
    return patterns


def _card_configs(card: str | None) -> list[dict]:
    if not card or not card.startswith("---"):
        return []
    header = card.split("---", 2)[1] if card.count("---") >= 2 else ""
    try:
        meta = yaml.safe_load(header) or {}
    except yaml.YAMLError:
        return []
    configs = meta.get("configs") if isinstance(meta, dict) else None
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def _choose_config(declared: list[dict], config: str | None) -> dict | None:
    """The config `datasets` loads for the name `config` (None: the default one)."""
    if config is not None:
        return next((c for c in declared if c.get("config_name", "default") == config), None)
    for rule in (
        lambda c: c.get("default") is True,
        lambda c: c.get("config_name", "default") == "default",
    ):
        found = [c for c in declared if rule(c)]
        if found:
            return found[0]
    return declared[0] if len(declared) == 1 else None


def _data_file_patterns(data_files) -> list[str]:
    """Every path pattern of a card config's `data_files` (a string, a list of strings, or a
    list of {split, path: string | list})."""
    if data_files is None:
        return []
    if isinstance(data_files, str):
        return [data_files]
    patterns = []
    for item in data_files:
        if isinstance(item, str):
            patterns.append(item)
        elif isinstance(item, dict):
            path = item.get("path")
            patterns.extend([path] if isinstance(path, str) else list(path or []))
    return patterns


# --- online: list and fetch ------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """A repository's files a sweep reads, with their sizes, and whether each is cached."""

    repo: HubRepo
    files: list[tuple[str, int]]
    cached: list[str]
    allow: list[str] | None
    ignore: list[str] | None

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def to_fetch(self) -> int:
        cached = set(self.cached)
        return sum(size for path, size in self.files if path not in cached)


def listing(repo: HubRepo) -> Listing:
    """Ask the Hub (HF_ENDPOINT) which files of `repo` the sweep reads, and their sizes."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi()
    try:
        sha = api.repo_info(repo.repo_id, repo_type=repo.kind).sha
        tree = {
            f.path: f.size
            for f in api.list_repo_tree(
                repo.repo_id, recursive=True, revision=sha, repo_type=repo.kind
            )
            if isinstance(f, RepoFile)
        }
    except Exception as error:  # noqa: BLE001 (network, auth, not found: all named the same way)
        raise ValueError(
            f"{repo.describe()} ({', '.join(repo.uses) or 'the sweep'}): could not list it at "
            f"{api.endpoint}: {type(error).__name__}: {error}"
        ) from error
    allow, ignore = None, None
    if repo.kind == MODEL:
        ignore = model_ignored(list(tree))
    else:
        card = None
        if CARD in tree:
            card_path = hf_hub_download(repo.repo_id, CARD, repo_type=DATASET, revision=sha)
            card = Path(card_path).read_text(encoding="utf-8")
        allow = dataset_patterns(card, repo.config, repo.repo_id)
    kept = list(filter_repo_objects(list(tree), allow_patterns=allow, ignore_patterns=ignore))
    cached = [p for p in kept if _cached(repo, p, sha)]
    return Listing(repo, [(p, tree[p]) for p in kept], cached, allow, ignore)


def _cached(repo: HubRepo, path: str, revision: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(
        try_to_load_from_cache(repo.repo_id, path, revision=revision, repo_type=repo.kind), str
    )


def fetch(found: Listing) -> str:
    """Download a listed repository's files into the cache; return its snapshot folder."""
    from huggingface_hub import snapshot_download

    return snapshot_download(
        found.repo.repo_id,
        repo_type=found.repo.kind,
        allow_patterns=found.allow,
        ignore_patterns=found.ignore,
    )


# --- offline: what the cache lacks ------------------------------------------------------


def missing(repos: list[HubRepo]) -> list[tuple[HubRepo, str]]:
    """The repositories whose files are not all in the cache, each with what is wrong; reads
    the cache only (no network)."""
    if not repos:
        return []
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    problems = []
    for repo in repos:
        try:
            _cached_snapshot(repo)
        except IncompleteSnapshotError as error:
            problems.append((repo, str(error).split(". ")[0]))
        except (LocalEntryNotFoundError, FileNotFoundError):
            problems.append((repo, "not in the Hugging Face cache"))
        except ValueError as error:
            problems.append((repo, str(error)))
    return problems


def _cached_snapshot(repo: HubRepo) -> str:
    """The cached snapshot folder of `repo`'s needed files; raises when they are not all there."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    first = CARD if repo.kind == DATASET else "config.json"
    found = try_to_load_from_cache(repo.repo_id, first, repo_type=repo.kind)
    if not isinstance(found, str):
        if repo.kind == MODEL:
            raise FileNotFoundError(first)
        found = None  # a dataset without a card: its whole repository is needed
    allow, ignore = None, None
    if repo.kind == MODEL:
        folder = Path(found).parent
        ignore = model_ignored([p.name for p in folder.rglob(f"*{SAFETENSORS}")])
    else:
        card = Path(found).read_text(encoding="utf-8") if found else None
        allow = dataset_patterns(card, repo.config, repo.repo_id)
    return snapshot_download(
        repo.repo_id,
        repo_type=repo.kind,
        local_files_only=True,
        allow_patterns=allow,
        ignore_patterns=ignore,
    )


def dataset_folder(repo_id: str, config: str | None) -> str:
    """The local snapshot holding a hub dataset's needed files: from the cache, downloading
    what is missing unless HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    repo = HubRepo(DATASET, repo_id, config)
    if not constants.HF_HUB_OFFLINE:
        return fetch(listing(repo))
    try:
        return _cached_snapshot(repo)
    except (LocalEntryNotFoundError, IncompleteSnapshotError) as error:
        raise FileNotFoundError(
            f"hub dataset {repo_id}: its files are not all in the Hugging Face cache "
            f"({cache_dir()}), and HF_HUB_OFFLINE is set: fetch it first (`mmspec fetch CONFIG`)"
        ) from error


def cache_dir() -> str:
    """The Hugging Face hub cache folder (HF_HUB_CACHE, or HF_HOME/hub)."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def size_text(size: float) -> str:
    """Bytes as a short human text (1000-based, as the Hub shows sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"
