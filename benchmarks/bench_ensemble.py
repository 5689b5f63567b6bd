"""The cost of one batched ensemble draft step (TABED) vs a single-view draft step.

A draft step is what `ModelDrafter` does per drafted token: one forward of the draft model over
all its views (one KV-cache row each, left-padded), the views' distributions mixed with the
block's weights, and the next token picked from the mixture. Compared, on the same prompt:

  single      views "M": one row (plain single-view drafting)
  batched 2   views "MT": two rows, one forward
  batched 4   views "MTCP": four rows, one forward
  serial 2/4  the released TABED code's way: one single-row drafter per view, run one after
              another (m forwards per step), then mixed

Models: the trained toy draft (`--draft`, default results/models/toy/draft), and a randomly
initialised model of the size of TABED's 68M draft (LLaMA-68M: hidden 768, 2 layers, 12 heads,
vocabulary 32000) with LLaVA-1.5's 576 visual tokens per image (`--no-68m` skips it). Nothing is
downloaded. Each setting is timed for `--steps` draft steps after `--warmup` steps, in rounds
that rotate the order of the settings; the median step time is reported, and every ratio is to
`single` in the same run.

    python benchmarks/bench_ensemble.py --threads 1 --json bench_ensemble.json
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mmspec.decoding import catalog
from mmspec.decoding.component import Values
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.timing import describe_device, pick_device, sync, versions
from mmspec.decoding.views import ImageInput, ViewContext
from mmspec.models import loading
from mmspec.models.visual import projector_of
from mmspec.toy import processor as toy_processor

PROMPT = "<bos> user : <image> describe the image . assistant :"
CAPTION = "a red circle at the top left , a blue square at the bottom right ."


def synthetic_68m(device: torch.device):
    """A random Llava with TABED's 68M draft's language model and a 24x24-patch vision grid."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig
    from transformers import LlavaForConditionalGeneration as Llava

    tokenizer = toy_processor.build_tokenizer()
    text = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=2,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=2048,
    )
    vision = CLIPVisionConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
    )
    torch.manual_seed(0)
    return Llava(config).to(device).eval(), tokenizer, 576


def toy_draft(path: str, device: torch.device):
    model = loading.load_model(path, device)
    tokenizer = loading.tokenizer_of(loading.load_processor(path))
    return model, tokenizer, toy_processor.IMAGE_TOKENS


def view_prompts(model, tokenizer, n_visual: int) -> dict[str, torch.Tensor]:
    """The prompt in views M, T, C, P from one random 'cached' image."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(n_visual, model.config.vision_config.hidden_size, generator=g)
    project = projector_of(model)
    with torch.inference_mode():
        image = ImageInput(project(features), features, CAPTION)
    ctx = ViewContext(tokenizer, model.get_input_embeddings(), "<image>", project)
    views = {v: catalog.get("view", v) for v in "MTCP"}
    return {
        v: view.from_spec(Values(view.defaults())).build(PROMPT, [image], ctx).embeds
        for v, view in views.items()
    }


class Serial:
    """The released code's ensemble: one single-row drafter per view, run one after another."""

    def __init__(self, model, prompts: list[torch.Tensor]):
        self.decoders = [Decoder(model) for _ in prompts]
        for decoder, prompt in zip(self.decoders, prompts, strict=True):
            decoder.prefill(prompt)
        self.weights = torch.full((len(prompts),), 1 / len(prompts))

    def step(self, token: int) -> int:
        logits = torch.cat([d.extend([token]).logits[:, -1] for d in self.decoders])
        return int((self.weights @ torch.softmax(logits.float(), -1)).argmax())


class Batched:
    """`ModelDrafter` itself (static, uniform weights): one forward over all views per draft
    step, then the mixture. Each step is a block's root position: the drafter feeds the token
    it has queued and returns the mixture after it."""

    def __init__(self, model, prompts: list[torch.Tensor]):
        self.drafter = ModelDrafter(Decoder(model), 0.0)
        self.drafter.start(prompts, first_token=0, target=None)

    def step(self, token: int) -> int:
        self.drafter.pending = [token]
        return int(self.drafter.root(sampler=None).argmax())


def time_steps(runner, steps: int, device) -> list[float]:
    out, token = [], 5
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
        runner.step(token)
        sync(device)
        out.append(time.perf_counter() - start)
    return out


def bench(model, tokenizer, n_visual, device, steps, warmup, rounds) -> dict:
    prompts = view_prompts(model, tokenizer, n_visual)
    settings = {
        "single": lambda: Batched(model, [prompts["M"]]),
        "batched_2": lambda: Batched(model, [prompts[v] for v in "MT"]),
        "batched_4": lambda: Batched(model, [prompts[v] for v in "MTCP"]),
        "serial_2": lambda: Serial(model, [prompts[v] for v in "MT"]),
        "serial_4": lambda: Serial(model, [prompts[v] for v in "MTCP"]),
    }
    times: dict[str, list[float]] = {name: [] for name in settings}
    names = list(settings)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            runner = settings[name]()  # fresh caches: every round drafts from the same length
            time_steps(runner, warmup, device)
            times[name] += time_steps(runner, steps, device)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "prompt_tokens": {v: int(p.shape[0]) for v, p in prompts.items()},
        "median_step_ms": {k: v * 1e3 for k, v in median.items()},
        "ratio_to_single": {k: v / median["single"] for k, v in median.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draft", default="results/models/toy/draft")
    parser.add_argument("--no-68m", action="store_true", help="skip the 68M-sized model")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = pick_device()
    models = {}
    if Path(args.draft).exists():
        models["toy_draft"] = lambda: toy_draft(args.draft, device)
    if not args.no_68m:
        models["random_68m"] = lambda: synthetic_68m(device)
    if not models:
        parser.error(f"{args.draft} does not exist (run the workflow) and --no-68m was given")
    result = {"device": describe_device(device), "versions": versions(), "threads": args.threads}
    for name, load in models.items():
        model, tokenizer, n_visual = load()
        result[name] = bench(
            model, tokenizer, n_visual, device, args.steps, args.warmup, args.rounds
        )
        print(f"{name}: prompt tokens {result[name]['prompt_tokens']}")
        for setting, ratio in result[name]["ratio_to_single"].items():
            ms = result[name]["median_step_ms"][setting]
            print(f"  {setting:10s} {ms:8.3f} ms/step  {ratio:5.2f}x single")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
