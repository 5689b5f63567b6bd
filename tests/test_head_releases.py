"""Medusa's, Hydra's and Kangaroo's heads as their releases define them: each test holds
mmspec's network, drafting or loss against an oracle transcribed from the release's formula
(file and function named), on small synthetic inputs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaModel

from mmspec.decoding import catalog
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import Drafter
from mmspec.decoding.drafters.heads import build_head, head_kind
from mmspec.decoding.drafters.kangaroo import KangarooDrafter
from mmspec.decoding.drafters.medusa import MEDUSA_TREE
from mmspec.decoding.drafters.model import DecoderDrafter
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.sampler import seeded
from mmspec.methods import registry, verify
from mmspec.training.heads import Sequence, make_batch


@pytest.fixture(scope="module")
def target():
    """The tiny random target of `mmspec verify-lossless` (float64, hidden 32, 2 layers)."""
    model, _ = verify.build_models(0, verify.build_tokenizer())
    return model


def _head(kind: str, target, seed: int = 0, **spec):
    """A head of `kind` for the tiny target, every weight and bias random (float64)."""
    spec = registry.resolve(kind, {"head_data": "x", **spec})
    head = build_head(spec.drafter, target.config, spec.head_training(), "tiny").double().eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    return head


class _Target:
    """What a multi-token drafter reads of the target's `Decoder`: its last feature, embedding
    table and read-out."""

    def __init__(self, model, feature):
        self.device = torch.device("cpu")
        self.hidden = feature[None]
        self.embed = model.get_input_embeddings()
        self.lm_head = model.lm_head

    def head_logits(self, h):
        return self.lm_head(h)


# --- Medusa: `medusa/model/medusa_model.py`, ResBlock.forward: x + SiLU(linear(x)) ---------


def _medusa_block(block, x):
    return x + F.silu(x @ block.linear.weight.T + block.linear.bias)


def test_a_medusa_head_is_a_silu_resblock_read_out_by_the_targets_lm_head(target):
    head = _head("medusa", target)
    f = torch.randn(3, target.config.text_config.hidden_size, dtype=torch.float64)
    for k in range(head.config.heads):
        torch.testing.assert_close(head.head(k, f), _medusa_block(head.blocks[k], f))
    # the release initialises W at zero (its `torch.nn.init.zeros_`, bias left as PyTorch sets
    # it): a fresh head is f_t + SiLU(b)
    training = registry.resolve("medusa", {}).head_training()
    fresh = build_head("medusa", target.config, training, "tiny").double()
    for block in fresh.blocks:
        assert not block.linear.weight.any()
        torch.testing.assert_close(block(f), f + F.silu(block.linear.bias))


def test_medusa_drafts_depth_k_from_head_k_whatever_the_parent(target):
    """Every node at depth d gets head d - 1's distribution over f_t (the release's
    `generate_candidates`: topk of `medusa_logits[i]` per head, shared by a level)."""
    head = _head("medusa", target)
    f = torch.randn(target.config.text_config.hidden_size, dtype=torch.float64)
    drafter = catalog.get("drafter", "medusa")(head, _Target(target, f), temperature=0.0)
    drafter.start(None, 3, drafter.target)
    tree = Proposal()
    for token, parent in [(1, ROOT), (2, ROOT), (5, 0), (6, 1), (7, 0)]:
        tree.add(token, parent)
    lm = target.lm_head.weight
    root = drafter.root(seeded(0))
    torch.testing.assert_close(root, torch.softmax(lm @ _medusa_block(head.blocks[0], f), -1))
    level = drafter.expand(tree, [0, 1])  # depth 1: head 1, both parents alike
    expected = torch.softmax(lm @ _medusa_block(head.blocks[1], f), -1)
    torch.testing.assert_close(level, expected.expand(2, -1))
    level = drafter.expand(tree, [2, 3, 4])  # depth 2: head 2
    expected = torch.softmax(lm @ _medusa_block(head.blocks[2], f), -1)
    torch.testing.assert_close(level, expected.expand(3, -1))


# --- Hydra: `hydra/model/hydra_heads/mlp_head.py`, grounded HydraMLP --------------------------
# ResBlock.forward: res_connection(x) + SiLU(linear(x)); _grounded_proposal: head i reads
# cat[h_t, e(candidate_id), e(child_1), ..., e(child_i)], candidate_id the target's argmax


def _hydra_block(block, x):
    residual = x @ block.residual.weight.T + block.residual.bias
    return residual + F.silu(x @ block.linear.weight.T + block.linear.bias)


def test_hydra_head_k_reads_the_targets_token_and_the_drafted_ones(target):
    head = _head("hydra", target)
    embed = target.get_input_embeddings().weight
    f = torch.randn(target.config.text_config.hidden_size, dtype=torch.float64)
    drafter = catalog.get("drafter", "hydra")(head, _Target(target, f), temperature=0.0)
    drafter.start(None, 3, drafter.target)  # x_{t+1} = 3, the tree's root
    tree = Proposal()
    for token, parent in [(1, ROOT), (2, ROOT), (5, 0), (6, 1)]:
        tree.add(token, parent)
    lm = target.lm_head.weight

    def oracle(k, tokens):
        x = torch.cat([f, *(embed[t] for t in [3, *tokens])])
        return torch.softmax(lm @ _hydra_block(head.blocks[k], x), -1)

    torch.testing.assert_close(drafter.root(seeded(0)), oracle(0, []))
    level = drafter.expand(tree, [0, 1])
    torch.testing.assert_close(level, torch.stack([oracle(1, [1]), oracle(1, [2])]))
    level = drafter.expand(tree, [2, 3])
    torch.testing.assert_close(level, torch.stack([oracle(2, [1, 5]), oracle(2, [2, 6])]))
    # grounded heads really differ by parent (a Medusa level would be one row repeated)
    assert not torch.allclose(level[0], level[1])


# --- the multi-token loss: Medusa's `train_legacy.py` compute_loss and Hydra's `train.py`
# compute_loss shift head i's labels by i + 2; Medusa weighs head i by 0.8**i (axolotl's
# `medusa_decay_coefficient`), Hydra sums its heads -----------------------------------------


@pytest.mark.parametrize("kind, decay", [("medusa", 0.8), ("hydra", 1.0)])
def test_head_k_learns_the_token_k_plus_2_ahead(target, kind, decay):
    head = _head(kind, target, medusa_heads=3, tree="chain", gamma=3)
    hidden = target.config.text_config.hidden_size
    g = torch.Generator().manual_seed(4)
    n = 9
    tokens = torch.randint(0, 8, (n + 1,), generator=g)  # x_0 .. x_n
    features = torch.randn(n, hidden, generator=g, dtype=torch.float64)  # f_0 .. f_{n-1}
    embed = target.get_input_embeddings().weight.detach()
    # entry j: the embedding of x_{j+1} and f_j (collect_sequence's layout); every entry counts
    sequence = Sequence(embed[tokens[1:]].float(), features.float(), 0)
    batch = make_batch([sequence], 0.0, torch.Generator())
    for name in ("embeds", "features", "clean", "targets"):
        setattr(batch, name, getattr(batch, name).double())
    lm_head = target.lm_head
    objective, metrics = head_kind(kind).loss({})(head, lm_head, batch)
    assert objective is metrics["kl"]
    kl = metrics["kl"]

    def read_out(h):
        return torch.log_softmax(lm_head(h), -1)

    expected = 0.0
    for k in range(3):
        terms = []
        # f_j's head k predicts x_{j+k+2}: the target's read-out of f_{j+k+1}
        for j in range(n - 1 - k):
            grounded = embed[tokens[j + 1 : j + k + 2]] if kind == "hydra" else None
            block = head.blocks[k]
            if grounded is None:
                out = _medusa_block(block, features[j])
            else:
                out = _hydra_block(block, torch.cat([features[j], *grounded]))
            p = read_out(features[j + k + 1])
            terms.append((p.exp() * (p - read_out(out))).sum())
        expected += decay**k * torch.stack(terms).mean()
    torch.testing.assert_close(kl, expected)


def test_medusa_and_hydra_draft_medusas_63_node_tree():
    """`mc_sim_7b_63` of Medusa's `medusa_choices.py` (the default of its
    `gen_model_answer_medusa.py`; Hydra's `hydra_choices.py` holds the same): 63 nodes over 4
    levels, closed under prefixes, ten children of the first node."""
    assert len(MEDUSA_TREE) == 63 and len({tuple(p) for p in MEDUSA_TREE}) == 63
    assert max(len(p) for p in MEDUSA_TREE) == 4
    assert all(p[:-1] in MEDUSA_TREE for p in MEDUSA_TREE if len(p) > 1)
    assert sorted(p[-1] for p in MEDUSA_TREE if len(p) == 2 and p[0] == 0) == list(range(10))
    assert [p for p in MEDUSA_TREE if len(p) == 4] == [[0, 0, 0, 0], [0, 0, 0, 1]]
    for method in ("medusa", "hydra"):
        spec = registry.resolve(method, {"head_data": "x"})
        assert spec.tree == "static" and spec.params["paths"] == MEDUSA_TREE
        assert spec.params["medusa_heads"] >= 4
        # neither release adds noise to the heads' input features (EAGLE's 0.2 is EAGLE's)
        assert spec.params["head_noise"] == 0.0
    assert registry.resolve("eagle", {"head_data": "x"}).params["head_noise"] == 0.2


# --- Kangaroo: `kangaroo/adapter.py` (AdapterModel: LlamaDecoderLayer = input_layernorm,
# self_attn, residual; no MLP; then norm) -------------------------------------------------------


def test_kangaroo_adapter_is_one_attention_layer_and_a_norm(target):
    adapter = _head("kangaroo", target, kangaroo_layers=1)
    assert not [name for name in adapter.state_dict() if "mlp" in name]
    # the oracle: a Llama layer with the adapter's attention and norms whose MLP adds nothing
    # (down_proj zero), i.e. norm(x + attn(input_layernorm(x)))
    reference = LlamaModel(copy.deepcopy(adapter.config)).double().eval()
    missing = reference.load_state_dict(adapter.model.state_dict(), strict=False).missing_keys
    assert sorted(missing) == sorted(
        f"layers.0.{m}"
        for m in (
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "post_attention_layernorm.weight",
        )
    )
    with torch.no_grad():
        reference.layers[0].mlp.down_proj.weight.zero_()
    x = torch.randn(1, 5, adapter.config.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(adapter(x), reference(inputs_embeds=x).last_hidden_state)


def test_kangaroo_draft_stack_runs_the_same_in_the_lean_forward(target):
    """The draft's stack (target layers, then the adapter) in mmspec's lean forward, which
    skips the adapter's missing MLP, equals transformers' own forward of it."""
    adapter = _head("kangaroo", target, kangaroo_layers=1)
    drafter = KangarooDrafter(adapter, Decoder(target), 0.0, 0.6)
    assert drafter.decoder.lean is not None
    plain = Decoder(
        target, lean=False, parts=(drafter.decoder.stack, target.lm_head, drafter.decoder.embed)
    )
    embeds = torch.randn(6, target.config.text_config.hidden_size, dtype=torch.float64)
    lean = drafter.decoder.prefill(embeds)
    torch.testing.assert_close(lean.logits, plain.prefill(embeds).logits)
    torch.testing.assert_close(drafter.decoder.extend([4, 2]).logits, plain.extend([4, 2]).logits)


def _release_draft_length(scores: list[float], steps: int = 6, threshold: float = 0.6) -> int:
    """Draft tokens per step in the release's `kangaroo_forward` (evaluation/
    inference_kangaroo.py): step s drafts a token unless `step == SPECULATIVE_DECODING_STEPS
    or (step > 0 and predict_score < threshold)`, predict_score being the last drafted token's
    top-1 probability."""
    drafted = 0
    for step in range(1 + steps):
        if step == steps or (step > 0 and scores[step - 1] < threshold):
            break
        drafted += 1
    return drafted


@pytest.mark.parametrize(
    "scores",
    [
        [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9],  # gamma caps the chain at 6
        [0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9],  # the first token is drafted, then it stops
        [0.9, 0.3, 0.9, 0.9, 0.9, 0.9, 0.9],  # the low-confidence second token is proposed
        [0.9, 0.8, 0.7, 0.59, 0.9, 0.9, 0.9],
        [0.6, 0.6, 0.6, 0.6, 0.6, 0.5, 0.9],  # 0.6 is not below the threshold
    ],
)
def test_kangaroo_stops_after_the_first_token_below_its_threshold(monkeypatch, scores):
    vocab = 5

    def distribution(top):
        q = torch.full((vocab,), (1 - top) / (vocab - 1), dtype=torch.float64)
        q[len(calls) % vocab] = top
        return q

    calls: list[str] = []

    def root(self, sampler):
        q = distribution(scores[0])
        calls.append("root")
        return q

    def expand(self, tree, nodes):
        q = distribution(scores[len(calls)])[None]
        calls.append("expand")
        return q

    monkeypatch.setattr(DecoderDrafter, "root", root)
    monkeypatch.setattr(DecoderDrafter, "expand", expand)
    drafter = KangarooDrafter.__new__(KangarooDrafter)
    Drafter.__init__(drafter, 0.0)
    drafter.exit_below, drafter.last_top = 0.6, 1.0
    chain = catalog.get("tree", "chain")(gamma=6).propose(drafter, seeded(0), room=100)
    assert len(chain.tokens) == _release_draft_length(scores)
    # no draft forward past the stop: one distribution per drafted token
    assert len(calls) == len(chain.tokens)
