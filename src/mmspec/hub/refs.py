"""References to the Hugging Face Hub: a hub id (owner/name) or a local path, told apart the
same way wherever a model or a dataset is named."""

from __future__ import annotations

import os
import re
from pathlib import Path

# A Hugging Face hub id: owner/name of letters, digits, '_', '.', '-', neither part starting or
# ending with '.' or '-' (the hub also forbids '--' and '..' inside, checked apart).
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
HUB_ID_RE = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
LOCAL_PREFIXES = ("./", "../", "/", "~")


def is_hub_id(ref: str) -> bool:
    """Whether `ref` could name a hub repository (owner/name), not only a local path."""
    return bool(HUB_ID_RE.fullmatch(ref)) and "--" not in ref and ".." not in ref


def is_local(ref: str) -> bool:
    """Whether `ref` is a local path: spelt as one, present here, or no hub id."""
    path = Path(os.path.expanduser(ref))
    return ref.startswith(LOCAL_PREFIXES) or path.exists() or not is_hub_id(ref)
