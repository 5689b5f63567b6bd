"""Trained drafter heads (EAGLE, Medusa, Hydra, Kangaroo; DREAM in test_dream.py): lossless
drafting on tiny models, training on the target's own features, resuming an interrupted
training run, and loading a head for the wrong target."""

from __future__ import annotations

import copy

import pytest
import torch

from mmspec.decoding import catalog
from mmspec.decoding.component import TRAINED_HEAD
from mmspec.decoding.drafters.eagle.net import EagleHead, head_config
from mmspec.decoding.drafters.heads import build_head, head_kind, load_head
from mmspec.decoding.drafters.model import DecoderDrafter, ModelDrafter
from mmspec.decoding.sampler import seeded
from mmspec.methods import registry, verify
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.methods.spec import MethodSpec
from mmspec.training.heads import collect_sequence, evaluate, split, train_head

TRAINING = {
    "head_steps": 60,
    "head_lr": 0.01,
    "head_batch_size": 4,
    "head_noise": 0.05,
    "head_layers": 1,
}


@pytest.fixture(scope="module")
def tiny():
    """A tiny random target (float64), its tokenizer and samples with one image each."""
    tokenizer = verify.build_tokenizer()
    target, _ = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    prompts = [" ".join(p) for p in (["a", "b", "<image>", "c"], ["<image>", "b", "a"])]
    prompts += ["c <image> a b", "<image> c c", "a <image>", "b a <image> c"]
    samples = [Sample(t, verify.random_images(target, generator), []) for t in prompts]
    return tokenizer, target, samples


def _head(target, seed=1):
    torch.manual_seed(seed)
    return EagleHead(head_config(target.config, target="tiny")).double().eval()


def _sequences(tokenizer, target, samples, n_new=16, loss=None):
    runner = MethodRunner(registry.resolve("ar", {}), target, None, tokenizer, "<image>")
    out = []
    for sample in samples:
        answer = runner.decode_ar(sample, n_new, set(), seeded(0)).tokens
        prompt = runner.target_prompt(sample)
        out.append(collect_sequence(runner.target, prompt, answer, loss))
    return runner, out


def _spec(method: str, **hparams) -> MethodSpec:
    return registry.resolve(method, {"head_data": "x", **hparams})


@pytest.mark.parametrize(
    "method, hparams",
    [
        ("eagle", {"tree": "chain", "gamma": 4}),
        ("eagle", {}),  # EAGLE's 25-node static tree
        ("eagle2", {"depth": 3, "top_k": 3, "total_tokens": 10}),
        ("medusa", {}),  # Medusa's 63-node tree (4 levels) over 5 heads
        ("medusa", {"tree": "dynamic", "depth": 2, "top_k": 3, "total_tokens": 8}),
        ("hydra", {"tree": "chain", "gamma": 4, "medusa_heads": 4}),
        ("kangaroo", {"kangaroo_layers": 1}),  # the chain's early exit at 0.6
    ],
)
def test_greedy_head_drafting_equals_ar_token_for_token(tiny, method, hparams):
    tokenizer, target, samples = tiny
    spec = _spec(method, **hparams)
    kind, training = spec.drafter, spec.head_training()
    _, sequences = _sequences(tokenizer, target, samples, loss=head_kind(kind).loss(training))
    torch.manual_seed(1)
    head = build_head(kind, target.config, training, "tiny").float()
    train_head(head, _lm_head(target), sequences, TRAINING, seed=0, kind=kind)
    head = head.double().eval()
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head)
    assert_greedy_equals_ar(runner, samples)


def assert_greedy_equals_ar(runner, samples) -> None:
    """The runner's method reproduces AR token for token on every sample, and some drafts are
    accepted (a trained head's: the check is not vacuous)."""
    accepted = 0
    for sample in samples:
        ar = runner.decode_ar(sample, 24, set(), seeded(0))
        sd = runner.decode(sample, 24, set(), seeded(0))
        assert sd.tokens == ar.tokens
        accepted += sum(step.accepted for step in sd.steps)
    assert accepted > 0


def _lm_head(target):
    lm_head = copy.deepcopy(target.lm_head).float()
    return lm_head


@pytest.mark.parametrize("method", ["eagle", "eagle2", "medusa", "hydra", "kangaroo"])
def test_head_sampling_is_lossless_by_exact_enumeration(method):
    verdict = verify.verify_method(method, {"head_data": "x"}, seed=5)
    assert verdict.tvd <= verify.TOLERANCE and verdict.greedy_equal, verdict


def test_training_raises_held_out_agreement(tiny):
    tokenizer, target, samples = tiny
    _, sequences = _sequences(tokenizer, target, samples)
    head = _head(target).float()
    _, held = split(sequences)
    before = evaluate(head, _lm_head(target), held, head_kind("eagle").loss(TRAINING))
    before = before["heldout_top1"]
    curve = train_head(head, _lm_head(target), sequences, {**TRAINING, "head_steps": 120}, 0)
    assert [row["step"] for row in curve] == list(range(12, 121, 12))
    assert curve[-1]["heldout_top1"] > before
    assert curve[-1]["loss"] < curve[0]["loss"]


def test_resumed_training_ends_where_an_uninterrupted_run_does(tiny):
    tokenizer, target, samples = tiny
    _, sequences = _sequences(tokenizer, target, samples)
    hp = {**TRAINING, "head_steps": 30}
    whole = _head(target).float()
    train_head(whole, _lm_head(target), sequences, hp, seed=3)

    states = []
    cut = _head(target).float()
    train_head(
        cut,
        _lm_head(target),
        sequences,
        {**hp, "head_steps": 30},
        seed=3,
        save=lambda s: states.append(copy.deepcopy(s)),
        eval_every=10,
    )
    resumed = _head(target).float()  # a fresh process: another head, the state of step 10
    train_head(resumed, _lm_head(target), sequences, hp, seed=3, state=states[0], eval_every=10)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_head_for_another_target_is_refused(tiny, tmp_path):
    _, target, _ = tiny
    head = EagleHead(head_config(target.config, target="toy:target"))
    head.save_pretrained(tmp_path / "head")
    loaded = load_head(tmp_path / "head", "toy:target", "cpu", torch.float32, "eagle")
    assert loaded.config.target == "toy:target"
    with pytest.raises(ValueError, match="trained for target 'toy:target', not for 'org/other'"):
        load_head(tmp_path / "head", "org/other", "cpu", torch.float32, "eagle")
    with pytest.raises(ValueError, match="no trained drafter head"):
        load_head(tmp_path / "missing", "toy:target", "cpu", torch.float32, "eagle")


def test_a_multi_token_head_refuses_trees_deeper_than_its_heads():
    with pytest.raises(ValueError, match="at most medusa_heads=3 tokens deep"):
        _spec("medusa", medusa_heads=3)  # Medusa's tree is 4 deep
    assert _spec("hydra", medusa_heads=3, tree="chain", gamma=3).gamma == 3


def test_kangaroo_exits_early_on_low_confidence(tiny):
    tokenizer, target, samples = tiny
    spec = _spec("kangaroo", kangaroo_layers=1, kangaroo_exit=1.0)  # exits after one token
    head = build_head("kangaroo", target.config, spec.head_training(), "tiny").double().eval()
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head)
    out = runner.decode(samples[0], 12, set(), seeded(0))
    assert {step.drafted for step in out.steps} == {1}
    spec = _spec("kangaroo", kangaroo_layers=1, kangaroo_exit=0.0)  # never exits early
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head)
    out = runner.decode(samples[0], 30, set(), seeded(0))
    assert max(step.drafted for step in out.steps) == 6


def test_kangaroo_drafts_as_a_draft_model_does_without_being_one():
    """Kangaroo drafts with its shallow stack as a draft model drafts (`DecoderDrafter`), and
    declares only its own: no views, no draft model, no image drafting."""
    kangaroo = catalog.get("drafter", "kangaroo")
    assert issubclass(kangaroo, DecoderDrafter) and not issubclass(kangaroo, ModelDrafter)
    assert kangaroo.requires == {TRAINED_HEAD} and not kangaroo.drafts_images
    with pytest.raises(ValueError, match="views"):
        _spec("kangaroo", views="T")


@pytest.mark.parametrize(
    "method, hparams, drafting",
    [
        ("eagle2", {}, 1.0),  # a dynamic tree ranks by q at 1 (EAGLE's release)
        ("eagle", {}, 1.0),  # a static tree
        ("eagle", {"tree": "chain", "gamma": 3}, 0.6),  # a chain draws from q at 0.6
        ("medusa", {}, 1.0),
    ],
)
def test_a_head_gives_q_at_the_temperature_its_tree_takes(tiny, method, hparams, drafting):
    tokenizer, target, _ = tiny
    spec = _spec(method, temperature=0.6, acceptance="sampling", **hparams)
    head = build_head(spec.drafter, target.config, spec.head_training(), "tiny")
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head.double().eval())
    assert runner.drafter.q_temperature == drafting
