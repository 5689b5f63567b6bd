"""EAGLE's head as the drafter of image generation (LANTERN's setting): trained on the image
target's own guided draws, it drafts under classifier-free guidance from both of the target's
rows; greedy drafting reproduces AR code for code, and sampling is exact by enumeration."""

from __future__ import annotations

import pytest
import torch
from head_jobs import image_head_job

from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.heads import build_head
from mmspec.decoding.enumeration import (
    Forker,
    speculative_distribution,
    target_distribution,
    total_variation,
)
from mmspec.decoding.loops import Speculation
from mmspec.decoding.probability import distribution
from mmspec.decoding.prompt import as_prompt
from mmspec.decoding.sampler import seeded
from mmspec.methods.image_runner import ImageMethodRunner
from mmspec.methods.registry import resolve
from mmspec.models.image_generation import ImageGenerator
from mmspec.stages import prepare, train_drafter
from mmspec.training.heads import collect_sequence, train_head

CPU = torch.device("cpu")
CFG = 3.0
TRAINING = {"head_steps": 80, "head_lr": 0.01, "head_batch_size": 8, "head_noise": 0.05}
CAPTIONS = ["a red circle top left .", "a blue square bottom right .", "a green star top right ."]


@pytest.fixture(scope="module")
def trained(imagegen_dirs, tmp_path_factory):
    """(target generator in float64, its EAGLE head trained on the target's draws, the
    training sequences)."""
    root = tmp_path_factory.mktemp("image_head")
    prepared = root / "prepared.parquet"
    prepare.run("toy_imagegen", {"source": "toy", "samples": 6}, str(prepared), 0)
    target_dir = str(imagegen_dirs[0])
    job = image_head_job(target_dir, CFG)
    decoder, sequences = train_drafter.collect_images(job, str(prepared), CPU)
    torch.manual_seed(0)
    training = resolve("eagle", {"head_data": "x"}).head_training()
    head = build_head("eagle", decoder.model.config, training, target_dir).float()
    train_head(head, decoder.lm_head.float(), sequences, TRAINING, seed=0)
    target = ImageGenerator.load(target_dir, CPU)
    target.model.double()
    return target, head.double().eval(), sequences


def test_each_caption_trains_on_two_draws_behind_both_prompts(trained):
    target, _, sequences = trained
    assert len(sequences) == 6 * 4  # (greedy, sampled) x (conditional, unconditional)
    for i in range(0, len(sequences), 4):
        greedy_c, greedy_u, drawn_c, drawn_u = sequences[i : i + 4]
        # the same codes behind each prompt: entries are prompt + grid - 1, the codes' the last
        for cond, uncond in ((greedy_c, greedy_u), (drawn_c, drawn_u)):
            assert len(cond.embeds) - cond.answer_from == target.grid + 1
            assert len(uncond.embeds) - uncond.answer_from == target.grid + 1
            assert torch.equal(cond.embeds[-target.grid + 1 :], uncond.embeds[-target.grid + 1 :])
        assert not torch.equal(greedy_c.embeds, drawn_c.embeds)  # one draw samples


def _runner(trained, method, hparams, temperature=0.0, top_k=0):
    target, head, _ = trained
    spec = resolve(method, {"head_data": "x", **hparams}, temperature)
    return ImageMethodRunner(spec, target, None, CFG, top_k, head=head)


@pytest.mark.parametrize(
    "method, hparams",
    [
        ("eagle", {"tree": "chain", "gamma": 4}),
        ("eagle2", {"depth": 3, "top_k": 3, "total_tokens": 8}),
        ("lantern_eagle2", {"lantern_k": 8, "lantern_delta": 0.0, "total_tokens": 8}),  # exact
    ],
)
def test_greedy_guided_head_drafting_equals_ar_code_for_code(trained, method, hparams):
    runner = _runner(trained, method, hparams)
    accepted = 0
    for caption in CAPTIONS:
        prompt = runner.prompt(caption)
        ar, sd = runner.decode_ar(prompt, None), runner.decode(prompt, None)
        assert sd.tokens == ar.tokens and len(sd.tokens) == runner.grid
        accepted += sum(step.accepted for step in sd.steps)
    assert accepted > 0  # the trained head's drafts are accepted: the check is not vacuous


def test_relaxed_lantern_over_the_head_accepts_more_than_exact_verification(trained):
    """Sampling (greedy drafts of this head already match nearly every code)."""
    steps, relaxed = {}, {}
    for delta in (0.0, 0.4):
        hparams = {"lantern_delta": delta, "lantern_k": 8}
        runner = _runner(trained, "lantern_eagle", hparams, temperature=1.0)
        decoded = [
            runner.decode(runner.prompt(caption), seeded(i)) for i, caption in enumerate(CAPTIONS)
        ]
        steps[delta] = sum(len(d.steps) for d in decoded)
        relaxed[delta] = sum(s.relaxed for d in decoded for s in d.steps)
    assert steps[0.4] < steps[0.0]
    # the codes only relaxation accepted are counted, and none at delta 0
    assert relaxed[0.0] == 0 and relaxed[0.4] > 0


@pytest.mark.parametrize(
    "method, hparams",
    [
        ("eagle", {"tree": "chain", "gamma": 2, "acceptance": "sampling"}),
        ("eagle2", {"depth": 2, "top_k": 2, "total_tokens": 4, "acceptance": "sampling"}),
    ],
)
def test_guided_head_sampling_is_exact_by_enumeration(trained, method, hparams):
    """The first three codes a sampling method emits have the guided, top-3 target's own
    distribution, exactly (float64)."""
    target, head, _ = trained
    runner = _runner(trained, method, hparams, temperature=1.0, top_k=3)
    fork = Forker([target.model, head])
    prompt = runner.prompt(CAPTIONS[0])
    reference = target_distribution(fork(runner.target), prompt.target, 3)

    def start(sampler):
        return Speculation(
            fork(runner.target),
            fork(runner.drafter),
            fork(runner.policy),
            runner.rule,
            1.0,
            sampler,
        )

    got = speculative_distribution(start, prompt.target, prompt.draft, 3, fork)
    assert len(reference) == 27 and total_variation(got, reference) <= 1e-9


def test_top_1_sampling_with_the_head_is_greedy_decoding(trained):
    greedy = _runner(trained, "eagle", {"tree": "chain", "gamma": 3})
    argmax = greedy.decode_ar(greedy.prompt(CAPTIONS[1]), None).tokens
    spec = {"tree": "chain", "gamma": 3, "acceptance": "sampling"}
    drawn = _runner(trained, "eagle", spec, 1.0, top_k=1)
    assert drawn.decode(drawn.prompt(CAPTIONS[1]), seeded(3)).tokens == argmax


def test_the_guided_q_reads_each_row_as_the_head_was_trained(trained):
    """The drafter's first q (both rows in one left-padded forward) is the guided read-out of
    the head run on each row alone, as in training: the conditional row's entries and the
    unconditional row's, each with the target's own features."""
    target, head, _ = trained
    runner = _runner(trained, "eagle", {"tree": "chain", "gamma": 2})
    prompt = runner.prompt(CAPTIONS[0])
    first = Speculation(runner.target, runner.drafter, runner.policy, runner.rule, 0.0, None)
    token = first.start(prompt.target, prompt.draft)
    q = runner.drafter.root(None)
    logits = []
    with torch.no_grad():
        for embeds in prompt.target:  # conditional, unconditional: lengths differ
            row = collect_sequence(Decoder(target.model), as_prompt(embeds), [token])
            predicted = head(row.embeds[None].double(), row.features[None].double())[0, -1]
            logits.append(target.model.lm_head(predicted))
    expected = distribution(runner.target.guide(*logits), 1.0)
    assert len(prompt.target[0]) != len(prompt.target[1])
    assert torch.allclose(q, expected, atol=1e-9)
