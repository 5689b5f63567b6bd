"""`mmspec verify-lossless`: prove a method lossless on tiny random models, exactly.

For each method, tiny random-init Llava target and draft models are built from `--seed` over a
vocabulary of 8 tokens, with a prompt holding one random image. At temperature 1 the exact
distribution of the first tokens the method emits (the prefill's token and the next `tokens`) is
computed by enumerating every draft draw and every acceptance outcome through the engine's own
code (decoding.enumeration) and compared with the target's own distribution (total variation
distance). At temperature 0 the method's output must equal AR's token for token.

A method whose acceptance rule is `greedy` is checked at temperature 1 with `sampling`, its
lossless counterpart for sampling. The engine never drafts deeper than the tokens a generation may
still emit (decoding.trees), which keeps the enumeration of drawn chains small.

A method whose rule is lossy by declaration (`AcceptanceRule.lossless_with` its values is False:
LVSpec, FLy, random relaxation; LANTERN needs an image generator's codebook, which these models
lack) is measured the same way and marked LOSSY, never FAIL: a distance from the target is what
its rule declares. Only methods declared lossless decide the exit status (`run`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from mmspec.decoding.component import TRAINED_HEAD
from mmspec.decoding.enumeration import (
    Forker,
    speculative_distribution,
    target_distribution,
    total_variation,
)
from mmspec.decoding.loops import Speculation
from mmspec.decoding.sampler import seeded
from mmspec.decoding.views import ImageInput
from mmspec.methods import registry
from mmspec.methods.components import AR, is_lossless
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.methods.spec import MethodSpec
from mmspec.models.visual import projector_of
from mmspec.scoring.lossless import first_divergence

WORDS = ["<unk>", "<image>", "\n", "image", ":", "a", "b", "c"]  # 8 tokens
PROMPTS = ["a b <image> c a :", "<image> b"]
CAPTION = "a c b"
IMAGE_SIZE, PATCH_SIZE = 32, 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 16
TOLERANCE = 1e-9
GREEDY_TOKENS = 24


@dataclass
class Verdict:
    method: str
    tvd: float  # max over prompts at temperature 1
    greedy_equal: bool
    outcomes: int  # sequences of first tokens with non-zero probability
    seconds: float
    note: str = ""
    # proposals the enumeration explored, and those holding a node (a drafter may propose
    # nothing: then a step verifies no draft, and only drafted ones exercise acceptance)
    proposals: int = 0
    drafted: int = 0
    lossy: str = ""  # the rule lossy by declaration, with its values ("" when lossless)

    @property
    def passed(self) -> bool:
        """Exact at T=1, equal to AR at greedy, and drafts were checked at all (a drafter that
        never proposed in the enumeration only ever ran AR's steps: nothing of it was proven)."""
        return self.tvd <= TOLERANCE and self.greedy_equal and self.drafted > 0

    @property
    def status(self) -> str:
        """ok, FAIL, UNTESTED (it never drafted) or LOSSY (its rule is lossy by declaration:
        measured, never a failure)."""
        if self.lossy:
            return "LOSSY"
        if self.drafted == 0:
            return "UNTESTED"
        return "ok" if self.passed else "FAIL"

    @property
    def explained(self) -> str:
        """The note the status needs: why LOSSY and UNTESTED are what they are."""
        notes = []
        if self.lossy:
            exact = self.tvd <= TOLERANCE and self.greedy_equal
            notes.append(
                f"lossy by declaration ({self.lossy}): a distance from the target is expected, "
                + ("and none showed here" if exact else "not a failure")
            )
        if self.drafted == 0:
            notes.append(
                f"never drafted in {self.proposals} explored proposals, so none of its drafts "
                "was checked (try other --spec values, another --seed or more --tokens)"
            )
        notes += [self.note] if self.note else []
        return ", ".join(notes)


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", extra_special_tokens={"image_token": "<image>"}
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["\n"]})
    return tokenizer


def build_models(seed: int, tokenizer):
    """A random target (hidden 32, 2 layers) and draft (hidden 16, 1 layer), float64, with
    sharpened output layers so that drafts are often rejected."""
    from mmspec.models import random_llava

    models = []
    for hidden, layers, scale, offset in [(32, 2, 6.0, 0), (16, 1, 4.0, 1)]:
        size = random_llava.Size(hidden, layers, heads=2, vision_hidden=64)
        model = random_llava.build(tokenizer, seed, IMAGE_SIZE, PATCH_SIZE, size)
        model = model.double().eval()
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed * 2 + offset)
            head = model.lm_head.weight
            head.copy_(torch.randn(head.shape, generator=generator, dtype=head.dtype) * scale)
            head.div_(head.shape[1] ** 0.5)
        models.append(model)
    return models


def build_head(method: MethodSpec, target, seed: int):
    """A random head of the method's kind on the target's features (float64, like the target),
    every part of it taking part in drafting (the kind's `random_network`, from the drafter's
    own values)."""
    from mmspec.decoding.drafters.heads import head_kind

    torch.manual_seed(seed)
    drafter = method.part("drafter")
    head = head_kind(drafter.name).random_network(target.config, drafter.values, "verify")
    return head.double().eval()


def random_images(model, generator) -> list[ImageInput]:
    """One random image as a tiny model caches it (projector output and features, a caption)."""
    features = torch.randn(
        IMAGE_TOKENS, model.config.vision_config.hidden_size, generator=generator
    ).double()
    with torch.no_grad():
        embeds = projector_of(model)(features)
    return [ImageInput(embeds, features, CAPTION)]


def checked_spec(
    name: str, hparams: dict, temperature: float, tokens: int
) -> tuple[MethodSpec, str]:
    """The spec a method is checked with at `temperature`, and what was changed to check it."""
    greedy = registry.resolve(name, {**hparams, "temperature": 0.0})
    if temperature == 0:
        return greedy, ""
    if greedy.acceptance == "greedy":
        swapped = {**hparams, "acceptance": "sampling", "temperature": temperature}
        return registry.resolve(name, swapped), "sampling at T=1"
    return registry.resolve(name, {**hparams, "temperature": temperature}), ""


def verify_method(name: str, hparams: dict, seed: int, tokens: int = 2) -> Verdict:
    """Check one method (a registry name and hyperparameters) on models built from `seed`."""
    started = time.perf_counter()
    tokenizer = build_tokenizer()
    target, draft = build_models(seed, tokenizer)
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for text in PROMPTS:
        target_images = random_images(target, generator)
        draft_images = random_images(draft, generator)
        # the draft's cached image is its own encoding of the same picture: same token count
        samples.append(Sample(text, target_images, draft_images))
    spec, note = checked_spec(name, hparams, 1.0, tokens)
    head = None
    if spec.needs(TRAINED_HEAD):
        head = build_head(spec, target, seed)
    fork = Forker([m for m in (target, draft, head) if m is not None])
    runner = MethodRunner(spec, target, draft, tokenizer, "<image>", head=head)
    worst, support, sizes = 0.0, 0, []
    for sample in samples:
        prompt, draft_prompts, score_visual = runner.speculative_inputs(sample)
        reference = target_distribution(fork(runner.target), prompt, tokens + 1)

        def start(sampler, runner=runner):
            return Speculation(
                fork(runner.target),
                fork(runner.drafter),
                fork(runner.policy),
                runner.rule,
                runner.temperature,
                sampler,
                runner.target_ctx.tokenizer,
            )

        got = speculative_distribution(
            start,
            prompt,
            draft_prompts,
            tokens + 1,
            fork,
            score_visual,
            seen=lambda proposal: sizes.append(len(proposal.tokens)),
        )
        worst = max(worst, total_variation(got, reference))
        support += len(got)

    greedy_spec, _ = checked_spec(name, hparams, 0.0, tokens)
    greedy = MethodRunner(greedy_spec, target, draft, tokenizer, "<image>", head=head)
    equal = True
    for k, sample in enumerate(samples):
        # a seeded sampler: random ensemble weights draw even when decoding greedily
        ar = greedy.decode_ar(sample, GREEDY_TOKENS, set(), seeded(seed))
        sd = greedy.decode(sample, GREEDY_TOKENS, set(), seeded(seed))
        if sd.tokens != ar.tokens and equal:
            where = first_divergence(sd.tokens, ar.tokens)
            note = ", ".join(
                filter(None, [note, f"greedy leaves AR at token {where} of prompt {k}"])
            )
        equal &= sd.tokens == ar.tokens
    drafted = sum(n > 0 for n in sizes)
    seconds = time.perf_counter() - started
    lossy = next((lossy_rule(s) for s in (spec, greedy_spec) if not s.lossless), "")
    return Verdict(name, worst, equal, support, seconds, note, len(sizes), drafted, lossy)


def lossy_rule(spec: MethodSpec) -> str:
    """A lossy spec's rule in words, with its values: "acceptance 'fly' (fly_k=...)"."""
    values = spec.part("acceptance").values
    given = ", ".join(f"{key}={value!r}" for key, value in values.items())
    return f"acceptance {spec.acceptance!r}" + (f" with {given}" if given else "")


def lossless_methods() -> list[str]:
    """Registry methods that draft and whose acceptance rule is lossless."""
    return [
        name
        for name, method in registry.METHODS.items()
        if method.defaults.get("drafter") != AR and is_lossless(method.defaults.get("acceptance"))
    ]


def run(seed: int, methods: list[str] | None, hparams: dict, tokens: int, echo=print) -> bool:
    """Verify `methods` (default: every lossless registry method); print a line each. True when
    every method declared lossless is ok (exact, equal to AR, and drafted); a LOSSY one is
    reported and does not count."""
    names = methods or lossless_methods()
    for name in names:  # a bad name or value is refused before any line of the table
        checked_spec(name, hparams, 1.0, tokens)
    echo(
        f"verify-lossless: seed {seed}, vocabulary {len(WORDS)}, first {tokens + 1} tokens at "
        f"T=1 (exact enumeration; tolerance {TOLERANCE:g}), {GREEDY_TOKENS} greedy tokens vs AR"
    )
    echo(
        f"{'method':<16} {'max TVD':>10} {'greedy':>7} {'outcomes':>9} {'drafted':>9} {'s':>6}  "
        "note"
    )
    passed = True
    for name in names:
        verdict = verify_method(name, hparams, seed, tokens)
        passed &= verdict.status in ("ok", "LOSSY")
        drafted = f"{verdict.drafted}/{verdict.proposals}"
        echo(
            f"{name:<16} {verdict.tvd:>10.2e} {'==AR' if verdict.greedy_equal else '!=AR':>7} "
            f"{verdict.outcomes:>9} {drafted:>9} {verdict.seconds:>6.1f}  {verdict.status} "
            f"{verdict.explained}"
        )
    return passed
