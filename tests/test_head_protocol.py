"""A head kind with a loss of its own, declared here only: a tiny head trained with a plain
cross-entropy on the target's next token. The training loop (`training.heads`) trains it as it
trains the built-in kinds, collecting what its loss asks for, and the engine drafts with it
losslessly."""

from __future__ import annotations

import copy

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from test_heads import assert_greedy_equals_ar
from torch import nn
from transformers import PreTrainedModel

from mmspec.decoding import catalog
from mmspec.decoding.drafters.eagle.net import EagleHeadConfig
from mmspec.decoding.drafters.head_loss import HeadLoss
from mmspec.decoding.drafters.heads import build_head, head_kind
from mmspec.decoding.drafters.trained import HEAD_NOISE, HEAD_TRAINING, HeadDrafter
from mmspec.decoding.probability import distribution
from mmspec.decoding.sampler import seeded
from mmspec.methods import registry, verify
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.stages import train_drafter
from mmspec.storage.tables import HEAD_CURVES, read_table, write_table
from mmspec.training.heads import collect_sequence, make_batch, split, train_head

NAME = "next_token_of_tests"
TRAINING = {"head_steps": 60, "head_lr": 0.02, "head_batch_size": 4, "head_noise": 0.0}


class NextTokenNet(PreTrainedModel):
    """f + SiLU(W [embedding of token t + 1, f]) from the target's feature f_t: a feature whose
    read-out is the head's guess of token t + 2."""

    config_class = EagleHeadConfig
    base_model_prefix = "head"

    def __init__(self, config: EagleHeadConfig):
        super().__init__(config)
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(self, embeds, features, attention_mask=None):
        return features + F.silu(self.fc(torch.cat([embeds, features.to(embeds.dtype)], -1)))


class NextTokenLoss(HeadLoss):
    """Cross-entropy of the head's read-out against the token the target emitted next; it
    collects those tokens (`next_token`, a kind's own tensor)."""

    def collect(self, target, prompt, answer, layers):
        """Entry j guesses the token at position j + 2: the answer's, from entry len(prompt) - 2
        on (the entries before it do not count)."""
        return {"next_token": torch.tensor([0] * (len(prompt) - 2) + answer, dtype=torch.long)}

    def __call__(self, head, lm_head, batch):
        predicted = head(batch.embeds, batch.features)[batch.mask]
        logits = lm_head(predicted)
        labels = batch.extra["next_token"][batch.mask]
        cross_entropy = F.cross_entropy(logits, labels)
        top1 = (logits.argmax(-1) == labels).float().mean()
        return cross_entropy, {"cross_entropy": cross_entropy, "top1": top1}


class NextTokenDrafter(HeadDrafter):
    """Drafts one token a step: the head over the target's last verified feature and the token
    that feature emitted."""

    name = NAME
    params = (*HEAD_TRAINING, HEAD_NOISE)
    training = tuple(p.key for p in params)
    description = "a next-token head (tests)"
    network_class = f"{__name__}:NextTokenNet"
    loss_class = f"{__name__}:NextTokenLoss"
    blocks = 0

    @classmethod
    def from_spec(cls, spec: dict, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(head, target, temperature)

    def __init__(self, head, target, temperature: float):
        super().__init__(temperature)
        self.head, self.target = head, target
        self.q_temperature = temperature if temperature > 0 else 1.0

    def start(self, prompts, first_token: int, target) -> None:
        self.commit(None, [], first_token, target)

    def root(self, sampler):
        with torch.inference_mode():
            embed = self.target.embed(torch.tensor([self.token], device=self.target.device))
            predicted = self.head(embed[0].to(self.head.dtype), self.feature.to(self.head.dtype))
            q = distribution(self.target.head_logits(predicted), self.q_temperature)
        self.forwards += 1
        return q

    def expand(self, tree, nodes: list[int]):
        return None  # one token a step

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        self.feature, self.token = target.hidden[-1], next_token


@pytest.fixture
def next_token_kind(monkeypatch):
    """The kind in the catalog, as a plugin's entry point would add it."""
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", NAME), NextTokenDrafter)
    return NextTokenDrafter


def test_a_head_with_its_own_loss_trains_in_the_loop_and_drafts_losslessly(
    next_token_kind, tmp_path
):
    tokenizer = verify.build_tokenizer()
    target, _ = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    prompts = ["a b <image> c", "<image> b a", "c <image> a b", "<image> c c", "a <image>"]
    prompts += ["b a <image> c", "c <image>", "<image> a"]
    samples = [Sample(t, verify.random_images(target, generator), []) for t in prompts]
    spec = registry.resolve("eagle", {"drafter": NAME, "tree": "chain", "gamma": 1})
    assert head_kind(NAME) is next_token_kind

    runner = MethodRunner(registry.resolve("ar", {}), target, None, tokenizer, "<image>")
    loss = head_kind(NAME).loss(TRAINING)
    sequences = []
    for sample in samples:
        answer = runner.decode_ar(sample, 16, set(), seeded(0)).tokens
        prompt = runner.target_prompt(sample)
        sequences.append(collect_sequence(runner.target, prompt, answer, loss))
    first = sequences[0]
    assert len(first.extra["next_token"]) == len(first.embeds) - 1
    torch.manual_seed(0)
    head = build_head(NAME, target.config, spec.head_training(), "tiny").float()
    lm_head = copy.deepcopy(target.lm_head).float()
    trained_on = make_batch(split(sequences)[0], 0.0, torch.Generator())
    before, _ = loss(head, lm_head, trained_on)
    curve = train_head(head, lm_head, sequences, TRAINING, seed=0, kind=NAME)
    after, _ = loss(head, lm_head, trained_on)
    assert after < before / 4

    # the curve holds the shared columns (0 where this kind has no such loss) and its own
    assert curve[-1]["heldout_kl"] == curve[-1]["heldout_feature_loss"] == 0.0
    assert curve[-1]["heldout_cross_entropy"] > 0 and 0 <= curve[-1]["heldout_top1"] <= 1
    # ... and the curves table the train_drafter stage writes keeps its own column
    schema = train_drafter.curves_schema(curve)
    write_table(pa.Table.from_pylist(curve, schema=schema), tmp_path / "curves.parquet", schema)
    written = read_table(tmp_path / "curves.parquet", HEAD_CURVES).to_pylist()
    assert [row["heldout_cross_entropy"] for row in written] == [
        row["heldout_cross_entropy"] for row in curve
    ]
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head.double().eval())
    assert_greedy_equals_ar(runner, samples)
