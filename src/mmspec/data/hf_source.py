"""The `source: hf` dataset source: a Hugging Face dataset by hub id, or a local folder that
`datasets` reads (a `save_to_disk` folder, or files such as a metadata.jsonl beside its
images). `data.hf_spec` checks an entry, `data.hf` prepares it."""

from __future__ import annotations

import os
from pathlib import Path

from mmspec.data import hf_spec
from mmspec.data.source import DatasetSource, register
from mmspec.hub.refs import LOCAL_PREFIXES


@register
class HuggingFaceDatasets(DatasetSource):
    kind = "hf"
    description = "a Hugging Face dataset, by hub id or local folder"
    size_key = "limit"

    def check(self, name: str, entry: dict) -> None:
        hf_spec.check_spec(entry)
        source = entry.get("id")
        # a path spelt as one must be here before any job (as a local model folder must)
        if isinstance(source, str) and source.startswith(LOCAL_PREFIXES):
            if not Path(os.path.expanduser(source)).exists():
                raise ValueError(
                    f"local dataset folder {source!r} does not exist (relative to {os.getcwd()})"
                )

    def has_second_turns(self, name: str, entry: dict) -> bool:
        return entry.get("conversation") is not None

    def has_qa(self, name: str, entry: dict) -> bool:
        return "qa" in entry.get("columns", {})

    def prepare(self, name: str, entry: dict, out: str, seed: int) -> int:
        from mmspec.data.hf import prepare_hf

        return prepare_hf(name, entry, out)
