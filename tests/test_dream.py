"""DREAM's head: lossless drafting with its cross-attention memory and visual token compression,
its intermediate-feature targets, and its training losses."""

from __future__ import annotations

import copy

import pytest
import torch
from test_heads import assert_greedy_equals_ar

from mmspec.decoding.drafters.dream.intermediate import candidate_layers, intermediate_features
from mmspec.decoding.drafters.heads import build_head, head_kind
from mmspec.decoding.sampler import seeded
from mmspec.methods import registry, verify
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.toy.recipe import ToyRecipe
from mmspec.toy.training import build_model
from mmspec.training.heads import collect_sequence, evaluate, split, train_head

# lr 0.03 made the tiny heads' training unstable: their held-out agreement swung between 0 and
# 1 from one evaluation to the next with the machine's rounding (AVX2 vs AVX-512 kernels)
TRAINING = {"head_data": "x", "head_steps": 80, "head_lr": 0.01, "head_batch_size": 4}
PROMPTS = ["a b <image> c", "<image> b a", "c <image> a b", "<image> c c", "a <image>", "b <image>"]


@pytest.fixture(scope="module")
def tiny():
    tokenizer = verify.build_tokenizer()
    target, _ = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    samples = [Sample(t, verify.random_images(target, generator), []) for t in PROMPTS]
    return tokenizer, target, samples


def _trained(tiny, method: str, **hparams):
    tokenizer, target, samples = tiny
    spec = registry.resolve(method, {**TRAINING, **hparams})
    training = spec.head_training()
    runner = MethodRunner(registry.resolve("ar", {}), target, None, tokenizer, "<image>")
    sequences = []
    loss = head_kind("dream").loss(training)
    for sample in samples:
        answer = runner.decode_ar(sample, 16, set(), seeded(0)).tokens
        prompt = runner.target_prompt(sample)
        sequences.append(collect_sequence(runner.target, prompt, answer, loss))
    torch.manual_seed(0)
    head = build_head("dream", target.config, training, "tiny").float()
    lm_head = copy.deepcopy(target.lm_head).float()
    train_head(head, lm_head, sequences, training, 0, kind="dream")
    trained_on, _ = split(sequences)
    agreement = evaluate(head, lm_head, trained_on, loss)["heldout_top1"]
    return spec, head.double().eval(), agreement


@pytest.mark.parametrize(
    "method, hparams",
    [
        ("dream", {}),  # dynamic tree, 75% of the visual tokens in the memory
        ("dream", {"tree": "chain", "gamma": 4, "dream_vtc": 0.5}),
        ("dream_nocross", {"tree": "static", "paths": [[0], [1], [0, 0], [1, 0], [0, 0, 0]]}),
        ("dream_fixed", {"dream_fixed_depth": 0.75}),  # Static-75%
    ],
)
def test_greedy_dream_equals_ar_token_for_token(tiny, method, hparams):
    tokenizer, target, samples = tiny
    spec, head, agreement = _trained(tiny, method, **hparams)
    # checked on what it was trained on (five sequences it learns by heart), not on the one
    # held-out sequence, whose agreement depends on the machine's rounding
    assert agreement > 0.5
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head)
    assert_greedy_equals_ar(runner, samples)


def test_vtc_keeps_the_share_of_visual_tokens_in_the_memory(tiny):
    tokenizer, target, samples = tiny
    spec, head, _ = _trained(tiny, "dream", dream_vtc=0.5)
    runner = MethodRunner(spec, target, None, tokenizer, "<image>", head=head)
    runner.decode(samples[0], 4, set(), seeded(0))
    prompt = runner.target_prompt(samples[0])
    memory = runner.drafter.memory[2].cpu()
    kept_visual = int(prompt.visual[memory[memory < len(prompt)]].sum())
    assert kept_visual == prompt.n_visual // 2
    assert int((~prompt.visual).sum()) == int((memory < len(prompt)).sum()) - kept_visual


@pytest.mark.parametrize("method", ["dream", "dream_nocross", "dream_fixed"])
def test_dream_sampling_is_lossless_by_exact_enumeration(method):
    verdict = verify.verify_method(method, {"head_data": "x"}, seed=7)
    assert verdict.tvd <= verify.TOLERANCE and verdict.greedy_equal, verdict


def test_intermediate_features_come_from_the_lowest_entropy_layer():
    """On an 8-layer target the candidates are hidden_states 1 and 2 (release: 1 .. int(0.4 L)
    - 2, at least 2); each position's feature is the one whose reading layer's attention there
    has the lower entropy, checked against transformers' own attentions and hidden states."""
    tokenizer = verify.build_tokenizer()
    spec = {"hidden": 32, "layers": 8, "heads": 2, "vision_hidden": 64, "steps": 0}
    model = build_model(ToyRecipe.parse(spec), tokenizer, 0).eval()
    assert candidate_layers(8, "entropy") == [1, 2] and candidate_layers(8, "fixed", 0.5) == [4]
    assert candidate_layers(30, "entropy") == list(range(1, 11))
    ids = torch.tensor([[2, 5, 6, 7, 5, 6, 2, 7, 7, 5]])
    embeds = model.get_input_embeddings()(ids)[0].detach()
    from mmspec.decoding.prompt import as_prompt

    features, layers = intermediate_features(
        model, as_prompt(embeds[:5]), ids[0, 5:].tolist(), "entropy"
    )
    stack = model.model.language_model
    stack.config._attn_implementation = "eager"
    with torch.no_grad():
        out = stack(inputs_embeds=embeds[None], output_attentions=True, output_hidden_states=True)

    def entropy(attentions):
        return torch.stack(
            [-(a[0] * a[0].clamp_min(1e-12).log()).sum(-1).mean(0) for a in attentions]
        )

    # hidden_states[l] is scored by attentions[l], the layer reading it (the release's pairing)
    expected = torch.tensor([1, 2])[entropy(out.attentions[1:3]).argmin(0)]
    assert torch.equal(layers, expected)
    assert len(set(expected.tolist())) == 2  # both layers are chosen somewhere: not vacuous
    # and that pairing decides here: scoring by the producing layer would choose otherwise
    producing = torch.tensor([1, 2])[entropy(out.attentions[0:2]).argmin(0)]
    assert not torch.equal(producing, expected)
    for i, layer in enumerate(expected.tolist()):
        torch.testing.assert_close(features[i], out.hidden_states[layer][0, i])


def test_the_fixed_layer_lies_at_its_share_of_the_targets_depth():
    """Static-25%, -50% and -75% (Section 4.2) of LLaVA-v1.6-Vicuna-7B's 32 layers and of the
    toy target's 8; dream_fixed's default is Static-50%, and only it reads the share."""
    assert [candidate_layers(32, "fixed", d)[0] for d in (0.25, 0.5, 0.75)] == [8, 16, 24]
    assert [candidate_layers(8, "fixed", d)[0] for d in (0.25, 0.5, 0.75)] == [2, 4, 6]
    assert candidate_layers(100, "fixed", 0.29) == [29]  # not 28 (0.29 x 100 = 28.999...)
    assert candidate_layers(1, "fixed", 0.5) == [1]
    with pytest.raises(ValueError, match="depth share"):
        candidate_layers(8, "fixed")
    assert registry.resolve("dream_fixed", {}).params["dream_fixed_depth"] == 0.5
    assert "dream_fixed_depth" not in registry.resolve("dream", {}).params
    with pytest.raises(ValueError, match="dream_fixed_depth"):
        registry.resolve("dream", {"dream_fixed_depth": 0.75})
    with pytest.raises(ValueError, match="dream_fixed_depth"):
        registry.resolve("dream_fixed", {"dream_fixed_depth": 1.0})
    # the share is a training setting: a head per share, and the layer reaches the collection
    kind = head_kind("dream")
    s75 = registry.resolve("dream_fixed", {"dream_fixed_depth": 0.75})
    assert "dream_fixed_depth" in s75.head_training()
    assert kind.loss(s75.head_training()).depth == 0.75


@pytest.mark.parametrize(("depth", "layer"), [(0.5, 4), (0.75, 6)])
def test_a_fixed_intermediate_feature_is_that_layers_output(depth, layer):
    tokenizer = verify.build_tokenizer()
    spec = {"hidden": 32, "layers": 8, "heads": 2, "vision_hidden": 64, "steps": 0}
    model = build_model(ToyRecipe.parse(spec), tokenizer, 0).eval()
    ids = torch.tensor([[2, 5, 6, 7, 5, 6, 2, 7, 7, 5]])
    embeds = model.get_input_embeddings()(ids)[0].detach()
    from mmspec.decoding.prompt import as_prompt

    features, layers = intermediate_features(
        model, as_prompt(embeds[:5]), ids[0, 5:].tolist(), "fixed", depth
    )
    with torch.no_grad():
        out = model.model.language_model(inputs_embeds=embeds[None], output_hidden_states=True)
    assert set(layers.tolist()) == {layer}
    torch.testing.assert_close(features, out.hidden_states[layer][0])
    assert not torch.allclose(features, out.hidden_states[4 if layer == 6 else 6][0])


def _head(cross=True, gates: float | None = None, vocab=11, heads=2, kv_heads=2):
    """A small DREAM head (and a read-out) over a made-up target of hidden size 16, with `heads`
    query heads and `kv_heads` key-value heads."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        num_hidden_layers=4,
    )
    torch.manual_seed(0)
    spec = registry.resolve("dream" if cross else "dream_nocross", {"head_data": "x"})
    head = build_head("dream", config, spec.head_training(), "made-up").double().eval()
    if gates is not None:
        with torch.no_grad():
            for name, parameter in head.named_parameters():
                if name.endswith("_gate"):
                    parameter.fill_(gates)
    lm_head = torch.nn.Linear(16, vocab, bias=False).double()
    return spec, head, lm_head


def _made_up_batch():
    """Two right-padded sequences (7 and 4 entries) whose loss counts from entry 2 and 1."""
    from mmspec.training.heads import Sequence, make_batch

    generator = torch.Generator().manual_seed(1)

    def sequence(n, answer_from):
        rand = lambda: torch.randn(n, 16, generator=generator)  # noqa: E731
        return Sequence(rand(), rand(), answer_from, {"intermediate": rand()[1:]})

    batch = make_batch([sequence(7, 2), sequence(4, 1)], 0.0, torch.Generator())
    for name in ("embeds", "features", "clean", "targets"):
        setattr(batch, name, getattr(batch, name).double())
    batch.extra["intermediate"] = batch.extra["intermediate"].double()
    return batch


@pytest.mark.parametrize("mode", ["release", "paper"])
def test_dream_loss_weighting_is_the_release_or_the_paper_formula(mode):
    """`dream_loss`: the training loss of a made-up padded batch equals, computed here from the
    head's outputs, the release's total (train/main_deepspeed.py: 0.2 x vloss + ploss +
    mid_vloss, SmoothL1 sums over all B x W positions, the KL's mean over the vocabulary over
    the counted ones) or the paper's (0.2, 0.2, 1.0 on masked means, the KL summed)."""
    import torch.nn.functional as F

    spec, head, lm_head = _head(gates=0.5)
    training = {**spec.head_training(), "dream_loss": mode}
    batch = _made_up_batch()
    assert 0 < int(batch.mask.sum()) < batch.mask.numel()  # padding and prompt entries
    got, _ = head_kind("dream").loss(training)(head, lm_head, batch)

    predicted, stream = head(batch.embeds, batch.features, attention_mask=batch.attention)
    intermediate = batch.extra["intermediate"]
    mask = batch.mask[..., None].double()  # [B, W, 1]
    positions = mask.shape[0] * mask.shape[1]
    smooth = lambda a, b: F.smooth_l1_loss(a, b, reduction="none")  # noqa: E731
    target_p = torch.softmax(lm_head(batch.targets), -1)
    kl = F.kl_div(torch.log_softmax(lm_head(predicted), -1), target_p, reduction="none")
    if mode == "release":
        vloss = torch.sum(torch.mean(mask * smooth(predicted, batch.targets), 2)) / positions
        mid = torch.sum(torch.mean(mask * smooth(stream, intermediate), 2)) / positions
        kldloss = torch.sum(torch.mean(mask * kl, 2)) / mask.sum()
        expected = 0.2 * vloss + 1.0 * kldloss + mid
    else:
        counted = mask.sum() * predicted.shape[-1]
        feature = (mask * smooth(predicted, batch.targets)).sum() / counted
        inter = (mask * smooth(stream, intermediate)).sum() / counted
        expected = 0.2 * feature + 0.2 * inter + (mask * kl).sum() / mask.sum()
    torch.testing.assert_close(got, expected)


def test_features_enter_the_head_only_through_its_cross_attention():
    """With the cross-attention's gates at 0 (a new head) no feature reaches the output or the
    intermediate stream; with them open, a feature reaches entry j exactly when its position is
    <= j; without the block (dream_nocross) features never matter."""
    embeds = torch.randn(1, 6, 16, dtype=torch.float64)
    features = torch.randn(1, 6, 16, dtype=torch.float64)
    moved = features.clone()
    moved[0, 3] += 1.0  # the feature at position 3

    def outputs(head, f):
        with torch.no_grad():
            return head(embeds, f)

    for cross, gates in ((True, None), (False, None)):
        _, head, _ = _head(cross=cross, gates=gates)
        for a, b in zip(outputs(head, features), outputs(head, moved), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    _, head, _ = _head(gates=0.5)
    (before, _), (after, _) = outputs(head, features), outputs(head, moved)
    torch.testing.assert_close(before[0, :3], after[0, :3], rtol=0, atol=0)
    assert (before[0, 3:] - after[0, 3:]).abs().amax(-1).min() > 1e-6


def test_a_drafted_node_reads_its_embedding_and_its_ancestors_outputs():
    """The drafter's q at each node of a small tree equals the head run afresh over the
    verified entries and the node's path (each entry its token's embedding), with the memory the
    prompt's features plus, at each path entry's position, its parent's output (release
    `topK_genrate`): the sibling's memory entry is not seen."""
    from mmspec.decoding.decoder import Decoder
    from mmspec.decoding.drafters import HeadPrompts
    from mmspec.decoding.drafters.dream import DreamDrafter
    from mmspec.decoding.proposal import ROOT, Proposal

    tokenizer = verify.build_tokenizer()
    target, _ = verify.build_models(0, tokenizer)
    runner = MethodRunner(registry.resolve("ar", {}), target, None, tokenizer, "<image>")
    generator = torch.Generator().manual_seed(0)
    sample = Sample("a b <image> c", verify.random_images(target, generator), [])
    prompt = runner.target_prompt(sample)
    decoder = Decoder(target)
    forward = decoder.prefill(prompt)
    spec = registry.resolve("dream", {"head_data": "x", "dream_vtc": 1.0})
    torch.manual_seed(3)
    drafter_values = spec.part("drafter").values
    head = DreamDrafter.random_network(target.config, drafter_values, "t").double().eval()
    drafter = DreamDrafter(head, decoder, 0.0, 1.0)
    drafter.start(HeadPrompts(prompt), 2, forward.row(0))
    q_root = drafter.root(None)
    tree = Proposal()
    a, b = tree.add(3, ROOT), tree.add(4, ROOT)
    q_ab = drafter.expand(tree, [a, b])
    c = tree.add(5, a)
    q_c = drafter.expand(tree, [c])

    embed = decoder.embed
    verified = torch.cat([prompt.embeds[1:], embed(torch.tensor([2]))])  # [L, H]
    features = forward.row(0).hidden  # [L, H]
    n = len(verified)

    def afresh(tokens, outputs):
        stream = torch.cat([verified, embed(torch.tensor(tokens, dtype=torch.long))])[None]
        memory = torch.cat([features, *[o[None] for o in outputs]])
        keys, values = head.model.cross.project(memory.double())
        positions = torch.arange(len(memory))[None]
        with torch.no_grad():
            out = head.model(
                inputs_embeds=stream.double(),
                position_ids=torch.arange(stream.shape[1])[None],
                memory=(keys[None], values[None], positions),
            ).last_hidden_state[0]
        return out, torch.softmax(decoder.lm_head(out), -1)

    out_root, q = afresh([], [])
    torch.testing.assert_close(q[n - 1], q_root)
    _, q = afresh([3], [out_root[n - 1]])
    torch.testing.assert_close(q[n], q_ab[0])
    _, q = afresh([4], [out_root[n - 1]])
    torch.testing.assert_close(q[n], q_ab[1])
    out_a, _ = afresh([3], [out_root[n - 1]])
    _, q = afresh([3, 5], [out_root[n - 1], out_a[n]])
    torch.testing.assert_close(q[n + 1], q_c[0])


def test_training_record_counts_one_intermediate_layer_per_training_entry():
    """training.json's layer counts are of the targets the loss reads (entry j learns position
    j + 1's intermediate feature, kept at row j), so they sum to its `entries`."""
    from types import SimpleNamespace

    def sequence(n, answer_from, layers):
        return SimpleNamespace(embeds=[0] * n, answer_from=answer_from, extra={"layers": layers})

    sequences = [
        sequence(6, 2, torch.tensor([9, 9, 1, 2, 2])),
        sequence(4, -1, torch.tensor([1, 2, 2])),
    ]
    counts = head_kind("dream").loss({}).summary(sequences)["intermediate_layers"]
    entries = sum(len(s.embeds) - max(s.answer_from, 0) - 1 for s in sequences)
    assert sum(counts.values()) == entries == 3 + 3
    assert counts == {"1": 2, "2": 4}


def test_dream_cross_attention_has_the_targets_key_value_heads():
    """As the release's LlamaCrossAttention (cnets.py: k_proj and v_proj of num_key_value_heads x
    head_dim, then repeat_kv): over a GQA target (4 query heads, 2 key-value heads) the head
    projects keys and values to 2 heads, each shared by its group of 2 query heads."""
    _, head, _ = _head(heads=4, kv_heads=2)
    cross = head.model.cross
    dim = 16 // 4
    assert tuple(cross.kv.weight.shape) == (2 * 2 * dim, 16)  # k_proj + v_proj of the release
    features = torch.randn(3, 16, dtype=torch.float64)
    keys, values = cross.project(features)
    assert keys.shape == values.shape == (4, 3, dim)
    v_proj = cross.kv.weight[2 * dim :]
    by_kv_head = (features @ v_proj.T).view(3, 2, dim).transpose(0, 1)
    for head_index in range(4):  # query heads 0, 1 read kv head 0; 2, 3 read kv head 1
        torch.testing.assert_close(values[head_index], by_kv_head[head_index // 2])
    assert torch.equal(keys[0], keys[1]) and not torch.allclose(keys[1], keys[2])
    batch = _made_up_batch()
    predicted, _ = head(batch.embeds, batch.features, attention_mask=batch.attention)
    assert predicted.shape == batch.embeds.shape and torch.isfinite(predicted).all()
