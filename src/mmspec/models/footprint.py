"""How much memory a job needs, from the sizes of the models it loads (no torch import).

A model's weight bytes in the dtype it is loaded in come from the first source that exists:
1. its safetensors files (a local folder or the newest HF cache snapshot): each file's header
   lists every tensor's dtype and shape, so the count is exact without reading the weights;
2. its config.json alone: a parameter count from the architecture (embeddings, attention, MLP,
   vision tower, projector); within a few percent of LLaVA-1.5-7B and the toy models, looser
   where a tiny vision tower dominates;
3. what its source knows without its files (`models.source`: `parameters`): a hub id's size
   in its name ("Qwen2.5-VL-72B-Instruct", "SmolVLM-256M"); for a model the workflow builds and
   has not built yet, its recipe in the config (a toy model's size);
4. none of these (a hub id not downloaded yet, with no size in its name): unknown, and the
   job gets the fallback request.

Snakemake calls these once per job when it builds the DAG, so sizes are cached per model.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mmspec.models import source as model_source

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# safetensors dtype codes: bytes per element, and whether from_pretrained(dtype=) casts them
SAFETENSORS_DTYPES = {
    "F64": (8, True),
    "F32": (4, True),
    "F16": (2, True),
    "BF16": (2, True),
    "F8_E4M3": (1, True),
    "F8_E5M2": (1, True),
    "I64": (8, False),
    "I32": (4, False),
    "I16": (2, False),
    "I8": (1, False),
    "U8": (1, False),
    "BOOL": (1, False),
}
MB = 1024 * 1024

# Host RAM of a job: Python + torch + transformers + the job's Parquet data (a generate job on
# tiny models peaks at 0.5 GB on CPU) + the CUDA libraries on a GPU node (a few GB), plus the
# weights, which pass through host memory once (from_pretrained materialises them before
# `.to(device)`, and CPU runs keep them).
HOST_BASE_MB = 4000
# GPU memory: the CUDA context and allocator slack, plus the weights.
GPU_BASE_MB = 1500
# Both times 1.2: the KV caches and activations of a job (long visual prompts, tree
# verification, a draft's cache per view) on top of the weights.
WEIGHT_FACTOR = 1.2
# A job whose model sizes are unknown asks for what the Slurm profile used to fix for every
# generate job.
FALLBACK_HOST_MB = 32000
FALLBACK_GPU_MB = 24000


@dataclass(frozen=True)
class Footprint:
    """Weight bytes of one model in one dtype (None: unknown) and where the number came from."""

    bytes: int | None
    source: str  # "safetensors", "config", "name", "unknown", or a source's estimate's own


@dataclass(frozen=True)
class JobMemory:
    """What one job should request: host RAM and (summed over its GPUs) GPU memory, in MB."""

    host_mb: int
    gpu_mb: int


@cache
def footprint(ref: str, dtype: str) -> Footprint:
    """The weight bytes of model `ref` loaded in `dtype` (see the module docstring)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{ref}: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    size = DTYPE_BYTES[dtype]
    source = model_source.of(ref)
    folder = source.folder(ref)
    if folder is not None:
        files = weight_files(folder)
        if files:
            return Footprint(sum(safetensors_bytes(f, size) for f in files), "safetensors")
        params = config_parameters(json.loads((folder / "config.json").read_text()))
        if params:
            return Footprint(params * size, "config")
    params, where = source.parameters(ref, None)
    if params:
        return Footprint(params * size, where)
    return Footprint(None, "unknown")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files from_pretrained reads: the shards its index names (a repository
    may also hold a consolidated copy, e.g. Mistral's), else model.safetensors, else all."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / name for name in shards if (folder / name).exists()]
    single = folder / "model.safetensors"
    return [single] if single.exists() else sorted(folder.glob("*.safetensors"))


def safetensors_bytes(path: Path, size: int) -> int:
    """Bytes of a safetensors file's tensors once floating ones are cast to `size`-byte
    elements (integer tensors keep theirs). Reads the header only."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        code = entry["dtype"]
        if code not in SAFETENSORS_DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unknown safetensors dtype {code!r}")
        stored, floating = SAFETENSORS_DTYPES[code]
        total += math.prod(entry["shape"]) * (size if floating else stored)
    return total


def _text_parameters(c: dict) -> int:
    """A decoder-only LM: embeddings, (untied) lm_head, attention and gated MLP per layer."""
    hidden, layers = c.get("hidden_size"), c.get("num_hidden_layers")
    vocab = c.get("vocab_size")
    if not (hidden and layers and vocab):
        return 0
    heads = c.get("num_attention_heads") or max(1, hidden // 128)
    head_dim = c.get("head_dim") or hidden // heads
    kv_heads = c.get("num_key_value_heads") or heads
    inter = c.get("intermediate_size") or 4 * hidden
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    experts = c.get("num_local_experts") or c.get("num_experts") or 1
    mlp = 3 * hidden * inter * experts
    tied = c.get("tie_word_embeddings", False)
    return vocab * hidden * (1 if tied else 2) + layers * (attention + mlp + 2 * hidden)


def _vision_parameters(v: dict, text_hidden: int) -> int:
    """A ViT (CLIP, SigLIP, Qwen-VL, Pixtral) and a two-layer projector into the LM."""
    width = v.get("embed_dim") or v.get("hidden_size")
    depth = v.get("depth") or v.get("num_hidden_layers")
    if not (width and depth):
        return 0
    inter = v.get("intermediate_size") or int((v.get("mlp_ratio") or 4) * width)
    patch = v.get("patch_size") or 14
    layer = 4 * width * width + 2 * width * inter
    projector = width * text_hidden + text_hidden * text_hidden
    return depth * layer + 3 * patch * patch * width + projector


def config_parameters(config: dict) -> int:
    """An estimate of a model's parameter count from its config.json (0: not recognised)."""
    text = config.get("text_config") or config
    if not text.get("hidden_size") and config.get("hidden_size"):
        text = config
    params = _text_parameters(text)
    vision = config.get("vision_config")
    if params and vision:
        params += _vision_parameters(vision, text["hidden_size"])
    return params


# "72B", "0.5b", "256M", "8x7B" (experts x size, an upper bound on a mixture's total)
_SIZE_IN_NAME = re.compile(r"(?<![0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")


def name_parameters(ref: str) -> int:
    """The parameter count a hub id states ("...-72B-...", "SmolVLM-256M"); 0 if none."""
    if "/" not in ref or Path(ref).exists():
        return 0
    found = _SIZE_IN_NAME.findall(ref.split("/", 1)[1].replace("_", "-"))
    if not found:
        return 0
    experts, number, unit = found[-1]
    return int(int(experts or 1) * float(number) * (1e9 if unit in "Bb" else 1e6))


def _round_up(mb: float) -> int:
    """Whole GB steps, so requests read as round numbers."""
    return int(math.ceil(mb / 1000.0) * 1000)


def model_footprint(ref: str, dtype: str, recipes: dict | None = None) -> Footprint:
    """`footprint`, with a model the workflow has not built yet sized by its source from its
    recipe (`recipes`: the config's models the workflow builds, by name)."""
    found = footprint(ref, dtype)
    if found.bytes is None:
        params, where = model_source.of(ref).parameters(ref, recipes)
        if params:
            return Footprint(params * DTYPE_BYTES[dtype], where)
    return found


def job_memory(models: list[tuple[str, str]], recipes: dict | None = None) -> JobMemory:
    """Host and GPU memory of a job loading `models` [(ref, dtype)] (a model loaded twice,
    as target and as draft, counts twice: it is two copies in memory); `recipes`: the config's
    models the workflow builds, by name (`toy.models`)."""
    sizes = [model_footprint(ref, dtype, recipes).bytes for ref, dtype in models]
    if None in sizes:
        return JobMemory(FALLBACK_HOST_MB, FALLBACK_GPU_MB)
    weights_mb = WEIGHT_FACTOR * sum(sizes) / MB
    return JobMemory(_round_up(HOST_BASE_MB + weights_mb), _round_up(GPU_BASE_MB + weights_mb))
