"""Build and train a toy-world Llava model; the result is an ordinary `save_pretrained` folder."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import LlavaForConditionalGeneration
from transformers.utils.chat_template_utils import _compile_jinja_template

from mmspec.data import media
from mmspec.models import random_llava
from mmspec.toy import processor as toy_processor
from mmspec.toy import world as toyworld
from mmspec.toy.recipe import ToyRecipe

IGNORE = -100


def build_model(recipe: ToyRecipe, tokenizer, seed: int) -> LlavaForConditionalGeneration:
    """A randomly initialised toy model (tiny CLIP vision tower + Llama decoder) of `recipe`'s
    size, reading the toy world's images."""
    return random_llava.build(
        tokenizer,
        seed,
        toy_processor.IMAGE_SIZE,
        toy_processor.PATCH_SIZE,
        random_llava.Size(recipe.hidden, recipe.layers, recipe.heads, recipe.vision_hidden),
    )


def encode_example(messages: list, tokenizer, text_only: bool) -> tuple[list, list]:
    """Token ids and labels of a conversation; every assistant answer and its <eos> is learned.
    Toy models are LLaVA-1.5 style: a video is read as its frames. The text is what
    `tokenizer.apply_chat_template` writes, and the ids what `tokenizer` gives it
    (tests/test_toy_training.py), at about half the cost: transformers' own compiled template
    and the backend tokenizer, without their per-call checks (a recipe encodes up to 10^5
    examples)."""
    template = _compile_jinja_template(tokenizer.chat_template)  # compiled once (cached)
    full = template.render(messages=media.frames_as_images(messages), add_generation_prompt=False)
    expand = "\n" if text_only else "<image>" * toy_processor.IMAGE_TOKENS
    text = full.replace("<image>", expand)
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    assistant, colon, eos = tokenizer.convert_tokens_to_ids(["assistant", ":", "<eos>"])
    labels, answering = [], False
    for i, token in enumerate(ids):
        labels.append(token if answering else IGNORE)
        if token == eos:
            answering = False
        elif i > 0 and token == colon and ids[i - 1] == assistant:
            answering = True
    return ids, labels


def make_batches(recipe: ToyRecipe, tokenizer, seed: int) -> list[list[dict]]:
    """`recipe.steps` batches of encoded examples, each batch from one scenario.

    The first `grounding_steps` batches are single-image captions: learning to read the image
    is the slow part, and captions teach it fastest; then scenarios take turns. One scenario per
    batch keeps padding low (stories are twice as long as captions). Images are dropped
    (text-only view) at random with probability `image_dropout`, and always for
    `text_scenarios`: a draft that, like a small LM, has read every kind of text but has only
    seen single images. A `vdesc_foreign_share` of the toy_vdesc examples are written in no house
    style (uniform synonyms, optional words in half the sentences, lists in either order; their
    own stream) and teach everything but the style's words (toyworld.STYLE_WORDS, unlabelled):
    a model that has read other phrasings, as a large one has, and goes on from them, without
    taking up their habits.
    """
    rng = np.random.default_rng(seed + 1)
    size = recipe.batch_size
    order = schedule(recipe)
    per_scenario = {name: order.count(name) * size for name in set(order)}
    pools = {}
    text_scenarios = set(recipe.text_scenarios)
    aligned = recipe.visual_alignment > 0
    null = recipe.alignment_null
    noise = recipe.vdesc_colour_noise
    style_ids = set(tokenizer.convert_tokens_to_ids(sorted(toyworld.STYLE_WORDS)))
    for name, n in sorted(per_scenario.items()):
        pool = []
        foreign = round(n * recipe.vdesc_foreign_share) if name == "toy_vdesc" else 0
        own = toyworld.training_turns([name], n - foreign, seed, recipe.vdesc_style, noise)
        others = toyworld.training_turns([name], foreign, seed, None, noise, stream=2)
        examples = [(turns, False) for turns in own] + [(turns, True) for turns in others]
        if foreign:  # mixed through the batches (a stream of its own: other recipes' data stays)
            order_rng = np.random.default_rng([seed, 2])
            examples = [examples[i] for i in order_rng.permutation(len(examples))]
        for turns, is_foreign in examples:
            messages, images = toyworld.training_example(turns)
            dropped = name in text_scenarios or rng.random() < recipe.image_dropout
            text_only = bool(images) and dropped
            ids, labels = encode_example(messages, tokenizer, text_only)
            if is_foreign:
                labels = [IGNORE if t in style_ids else y for t, y in zip(ids, labels, strict=True)]
            keep = not text_only and images
            pixels = np.stack(images) if keep else np.zeros((0, 32, 32, 3), np.uint8)
            example = {"ids": ids, "labels": labels, "images": pixels}
            if aligned:
                example["shows"] = alignment_targets(turns, ids, labels, tokenizer, text_only, null)
            pool.append(example)
        pools[name] = pool
    batches, used = [], dict.fromkeys(pools, 0)
    for name in order:
        batches.append(pools[name][used[name] : used[name] + size])
        used[name] += size
    return batches


# Words whose last-layer state `visual_alignment` draws toward the states of the patches that
# show them (toyworld.patch_words names what each patch shows): the visual words but counts
ALIGNED_WORDS = toyworld.VISUAL_WORDS - set(toyworld.NUMBERS)
ALIGNMENT_TEMPERATURE = 0.1  # of the softmax over a sample's visual tokens (CLIP's scale)
# `alignment_null`: the cosine of the "no patch" choice, which words naming nothing shown learn
# to pick (every patch below it) and words naming something learn to rank below their patches
ALIGNMENT_NULL_COSINE = 0.3


def alignment_targets(turns, ids: list, labels: list, tokenizer, text_only: bool, null=False):
    """For `visual_alignment`: the answer positions whose word names what some of the sample's
    patches show, and which visual tokens show it ([n, visual] bool), or None. `null`: also
    every answer position whose word is not visual (toyworld.VISUAL_WORDS), with no patch."""
    if text_only:
        return None
    shows = []
    for turn in turns:
        if turn.video:
            shows += toyworld.video_patch_words(turn.scenes, toy_processor.PATCH_SIZE)
        else:
            for scene in turn.scenes:
                shows += toyworld.patch_words(scene, toy_processor.PATCH_SIZE)
    words = tokenizer.convert_ids_to_tokens(ids)
    positions, masks = [], []
    for t, word in enumerate(words):
        if labels[t] == IGNORE:
            continue
        if word in ALIGNED_WORDS:
            mask = [word in patch for patch in shows]
            if any(mask):
                positions.append(t)
                masks.append(mask)
        elif null and word not in toyworld.VISUAL_WORDS:
            positions.append(t)
            masks.append([False] * len(shows))
    if not positions:
        return None
    return torch.tensor(positions), torch.tensor(masks)


def alignment_loss(hidden: torch.Tensor, visual: torch.Tensor, shows: list) -> torch.Tensor:
    """The toy stand-in for a real VLM's cross-modal alignment (LVSpec's premise, its Section
    3.1): at each answer word that names what some patches show, cross-entropy of a softmax over
    the sample's visual tokens (cosine of last-layer states / ALIGNMENT_TEMPERATURE) against the
    patches that show it. Where the targets hold rows with no patch (`alignment_null`), the
    softmax has one more choice, "no patch" at ALIGNMENT_NULL_COSINE, the target of those rows.
    `hidden` [B, T, H] last-layer states, `visual` [B, T] visual positions, `shows` per sample
    alignment_targets (or None)."""
    losses = []
    for b, targets in enumerate(shows):
        if targets is None:
            continue
        positions, mask = targets
        words = torch.nn.functional.normalize(hidden[b, positions.to(hidden.device)], dim=-1)
        patches = torch.nn.functional.normalize(hidden[b][visual[b]], dim=-1)
        logits = words @ patches.T / ALIGNMENT_TEMPERATURE
        mask = mask.to(logits.device)
        none = ~mask.any(-1, keepdim=True)
        if none.any():
            null = logits.new_full((len(logits), 1), ALIGNMENT_NULL_COSINE / ALIGNMENT_TEMPERATURE)
            logits, mask = torch.cat([logits, null], -1), torch.cat([mask, none], -1)
        logp = torch.log_softmax(logits, dim=-1)
        losses.append(-(logp * mask).sum(-1) / mask.sum(-1))
    if not losses:
        return hidden.new_zeros(())
    return torch.cat(losses).mean()


def schedule(recipe: ToyRecipe) -> list[str]:
    """The scenario of every training batch: a caption-only grounding phase, then round-robin."""
    scenarios = [*recipe.scenarios, *recipe.text_scenarios]
    grounding = recipe.grounding_steps if "toy_caption" in scenarios else 0
    grounding = min(grounding, recipe.steps)
    rest = recipe.steps - grounding
    return ["toy_caption"] * grounding + [scenarios[i % len(scenarios)] for i in range(rest)]


def collate(batch: list[dict], pad_id: int) -> dict:
    """Right-padded tensors for a batch; images of all examples concatenated in order."""
    width = max(len(e["ids"]) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, e in enumerate(batch):
        ids[i, : len(e["ids"])] = torch.tensor(e["ids"])
        labels[i, : len(e["labels"])] = torch.tensor(e["labels"])
        mask[i, : len(e["ids"])] = 1
    out = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    images = np.concatenate([e["images"] for e in batch])
    if len(images):
        out["pixel_values"] = toy_processor.pixel_values(images)
    if any("shows" in e for e in batch):
        out["shows"] = [e.get("shows") for e in batch]
    return out


def fit(model, batch_at, recipe: ToyRecipe, desc: str, loss_of=None) -> list[float]:
    """AdamW over `recipe.steps` batches (`batch_at(step)`: the model's keyword inputs, labels
    included) with linear warm-up and cosine decay of `recipe.lr`; the losses. `loss_of(model,
    batch)` replaces the model's own loss."""
    steps = recipe.steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    model.train()
    losses = []
    bar = tqdm(range(steps), desc=desc, mininterval=5)
    for step in bar:
        # fp32 on purpose: CPUs without native bf16 run autocast many times slower.
        batch = batch_at(step)
        loss = loss_of(model, batch) if loss_of else model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 25 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-25:]):.3f}", refresh=False)
    return losses


def save_trained(out_dir, parts, recipe: ToyRecipe, seed: int, start: float, losses) -> dict:
    """Save `parts` (anything with save_pretrained, else a callable taking the folder) to
    `out_dir` with training.json (recipe, seed, seconds since `start`, losses); the record."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        part.save_pretrained(out) if hasattr(part, "save_pretrained") else part(out)
    record = {
        "spec": recipe.completed,
        "seed": seed,
        "seconds": time.perf_counter() - start,
        "first_loss": float(np.mean(losses[:10])),
        "final_loss": float(np.mean(losses[-20:])),
    }
    (out / "training.json").write_text(json.dumps(record, indent=1))
    return record


def train(recipe: ToyRecipe, out_dir: str | Path, seed: int, threads: int = 1) -> dict:
    """Train one toy captioner as `recipe` says and save it (with its processor) to `out_dir`."""
    torch.set_num_threads(threads)
    processor = toy_processor.build_processor()
    tokenizer = processor.tokenizer
    model = build_model(recipe, tokenizer, seed)
    batches = make_batches(recipe, tokenizer, seed)
    start = time.perf_counter()
    losses = fit(
        model,
        lambda step: collate(batches[step], tokenizer.pad_token_id),
        recipe,
        f"train {Path(out_dir).name}",
        _aligned_loss(recipe.visual_alignment, model.config.image_token_index),
    )
    model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    log = {
        "spec": recipe.completed,
        "seed": seed,
        "seconds": time.perf_counter() - start,
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "loss_every_50": losses[::50],
    }
    (out_dir / "training.json").write_text(json.dumps(log, indent=1))
    return log


def _aligned_loss(weight: float, image_id: int):
    """Next-token loss plus `weight` x alignment_loss, for fit (batches carry alignment targets
    only when make_batches was asked for them: otherwise the next-token loss alone)."""

    def loss_of(model, batch: dict) -> torch.Tensor:
        shows = batch.pop("shows", None)
        out = model(**batch, output_hidden_states=shows is not None)
        if shows is None:
            return out.loss
        visual = batch["input_ids"] == image_id
        return out.loss + weight * alignment_loss(out.hidden_states[-1], visual, shows)

    return loss_of


@torch.inference_mode()
def confidence(model, examples) -> tuple[float, float]:
    """Mean top-1 and top-10 probability `model` gives its next token at the labelled positions
    of `examples` ((model inputs of one sequence, labels) pairs), teacher-forced."""
    top1, top10 = [], []
    for inputs, labels in examples:
        logits = model(**inputs).logits[0, :-1]
        probs = torch.softmax(logits.float(), -1)[torch.tensor(labels[1:]) != IGNORE]
        best = probs.topk(min(10, probs.shape[-1]), dim=-1).values
        top1.append(best[:, 0])
        top10.append(best.sum(-1))
    return float(torch.cat(top1).mean()), float(torch.cat(top10).mean())
