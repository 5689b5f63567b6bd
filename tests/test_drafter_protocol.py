"""The drafter protocol's token-level arguments and its ways of drafting less.

A drafter that reads tokens sees exactly the ids the target reads (visual spans where its visual
tokens are, every committed token at every step) on the toy world's Llava path, on the path with
no family builder (`mmspec verify-lossless`'s) and on Qwen2.5-VL's; a drafter that proposes
nothing gives the target's own tokens, draw for draw, under every tree policy and rule; one that
stops early is honoured by every tree policy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from component_parts import part
from PIL import Image

from mmspec.decoding import catalog
from mmspec.decoding.component import Param
from mmspec.decoding.decoder import Decoder, Forward
from mmspec.decoding.drafters import Drafter, HeadPrompts
from mmspec.decoding.enumeration import outcomes
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.sampler import seeded
from mmspec.decoding.token_context import visual_spans
from mmspec.decoding.trees import EAGLE_TREE, ChainPolicy, DynamicTree, SageTree, StaticTree
from mmspec.decoding.views import Chat, FullView, ImageInput, ViewContext
from mmspec.methods import registry
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.models import loading, visual
from mmspec.models.visual import projector_of

RULES = ["greedy", "sampling", "lantern", "lvspec", "fly", "fly_gate", "random_relax"]
MESSAGES = [
    {
        "role": "user",
        "content": [{"type": "image"}, {"type": "text", "text": "describe the image ."}],
    },
    {"role": "assistant", "content": "a red circle at the top left ."},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and this one ?"}]},
]
MAX_NEW = 24


def _policies() -> dict:
    return {
        "chain": ChainPolicy(5),
        "static": StaticTree(EAGLE_TREE),
        "dynamic": DynamicTree(4, 3, 12),
        "sage": SageTree(),
    }


def _point_mass(token: int, vocab: int) -> torch.Tensor:
    q = torch.zeros(vocab)
    q[token] = 1.0
    return q


class ContextRecorder(Drafter):
    """Reads tokens: proposes nothing at every other step, and at the others the next two
    tokens of `answer` (the AR output) then a wrong one, so a step commits three tokens;
    records the committed tokens the context showed at each proposal."""

    name = "context_recorder"
    reads_tokens = True

    @classmethod
    def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
        return cls(temperature)

    def start(self, prompts, first_token, target, tokens):
        self.prompts, self.first, self.tokens = prompts, first_token, tokens
        self.vocab, self.seen, self.plan = target.logits.shape[-1], [], []

    def root(self, sampler):
        done = list(self.tokens.output)
        self.seen.append(done)
        if len(self.seen) % 2:
            return None
        n = len(done)
        right = self.answer[n : n + 2]
        self.plan = (
            right + [(self.answer[n + 2] + 1) % self.vocab] if n + 2 < len(self.answer) else right
        )
        return _point_mass(self.plan[0], self.vocab) if self.plan else None

    def expand(self, tree, nodes):
        depth = len(tree.ancestors(nodes[0])) + 1
        return _point_mass(self.plan[depth], self.vocab)[None] if depth < len(self.plan) else None

    def commit(self, tree, path, next_token, target):
        step = [tree.tokens[i] for i in path] + [next_token]
        assert self.tokens.output[-len(step) :] == step  # the context is current at commit


def _random_images(n: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)]


def _recorded_run(runner: MethodRunner, sample: Sample):
    ar = runner.decode_ar(sample, MAX_NEW, set(), None)
    runner.drafter.answer = ar.tokens
    sd = runner.decode(sample, MAX_NEW, set(), seeded(0))
    return ar, sd, runner.drafter


def _check_context(drafter, prompt, expected_ids, image_id, ar, sd, embed):
    """The context is the target's prompt ids, its visual runs and every committed token."""
    context = drafter.tokens
    assert torch.equal(context.prompt, expected_ids)
    assert torch.equal(context.prompt, prompt.ids)  # the prompt the target was prefilled with
    assert torch.equal(context.visual, expected_ids == image_id)
    # the ids are what the target read: their embeddings are its prompt's at every text position
    text = ~context.visual
    with torch.no_grad():
        torch.testing.assert_close(embed(expected_ids)[text], prompt.embeds[text], rtol=0, atol=0)
    runs = visual_spans(expected_ids == image_id)
    assert context.spans == runs and len(runs) >= 1
    assert sum(b - a for a, b in context.spans) == prompt.n_visual
    assert drafter.prompts[0] is prompt and drafter.first == sd.tokens[0]
    assert context.tokenizer is not None
    # greedy: the target's tokens; every proposal saw exactly the tokens emitted before it
    assert sd.tokens == ar.tokens
    emitted = 1
    for step, seen in zip(sd.steps, drafter.seen, strict=False):
        assert seen == sd.tokens[:emitted]
        emitted += step.accepted + 1
    assert context.output[: len(sd.tokens)] == sd.tokens
    assert len(drafter.seen) == len(sd.steps)
    empty = [s for s in sd.steps if s.drafted == 0]
    assert len(empty) == (len(sd.steps) + 1) // 2  # every other step proposed nothing
    assert all((s.accepted, s.depth, s.width) == (0, 0, 0) for s in empty)
    assert any(s.accepted == 2 for s in sd.steps)  # steps that drafted committed three tokens


@pytest.fixture
def recorder(monkeypatch):
    """The recording drafter in the catalog, as a plugin's drafter would be."""
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", ContextRecorder.name), ContextRecorder)
    return registry.resolve("sd_chain", {"drafter": ContextRecorder.name, "gamma": 4})


def test_the_context_is_exact_on_the_toy_llava_path(recorder, processor, target_model):
    """The family builder's path (the toy world's Llava processor lays the prompt out)."""
    tokenizer = processor.tokenizer
    runner = MethodRunner(recorder, target_model, None, tokenizer, "<image>", processor)
    images = _random_images(2, 0)
    cached = [visual.encode_image(target_model, processor.image_processor, i) for i in images]
    text = runner.target_ctx.builder.render(MESSAGES)
    inputs = [ImageInput(e, image=i) for e, i in zip(cached, images, strict=True)]
    sample = Sample(Chat(text, MESSAGES), inputs, [])
    ar, sd, drafter = _recorded_run(runner, sample)
    expected = processor(text=[text], images=images, return_tensors="pt").input_ids[0]
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    embed = target_model.get_input_embeddings()
    _check_context(drafter, sample.target, expected, image_id, ar, sd, embed)
    assert len(drafter.tokens.spans) == 2  # a caption between the two images


def test_the_context_is_exact_without_a_family_builder(recorder, processor, target_model):
    """Image tokens expanded in the text (`views.embed_with_images`: verify-lossless's path)."""
    tokenizer = processor.tokenizer
    runner = MethodRunner(recorder, target_model, None, tokenizer, "<image>")
    g = torch.Generator().manual_seed(1)
    features = torch.randn(16, target_model.config.vision_config.hidden_size, generator=g)
    with torch.no_grad():
        embeds = projector_of(target_model)(features)
    text = "<bos> user : <image> describe the image . assistant : a red"
    sample = Sample(text, [ImageInput(embeds)], [])
    ar, sd, drafter = _recorded_run(runner, sample)
    expanded = text.replace("<image>", "<image>" * 16)
    expected = tokenizer(expanded, return_tensors="pt").input_ids[0]
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    embed = target_model.get_input_embeddings()
    _check_context(drafter, sample.target, expected, image_id, ar, sd, embed)
    assert torch.equal(sample.target.embeds[sample.target.visual], embeds)


def test_the_context_is_exact_on_qwen2_5_vl(recorder, model_dirs):
    """M-RoPE positions and <|vision_start|> markers: the ids are still one per position."""
    path = model_dirs["qwen2_5_vl"][0]
    model = loading.load_model(str(path), torch.device("cpu"))
    processor = loading.load_processor(str(path))
    tokenizer = loading.tokenizer_of(processor)
    image_token = loading.image_token_of(processor)
    runner = MethodRunner(recorder, model, None, tokenizer, image_token, processor)
    images = _random_images(2, 2)
    cached = [visual.encode_image(model, processor.image_processor, i) for i in images]
    text = runner.target_ctx.builder.render(MESSAGES)
    inputs = [ImageInput(e, image=i) for e, i in zip(cached, images, strict=True)]
    sample = Sample(Chat(text, MESSAGES), inputs, [])
    ar, sd, drafter = _recorded_run(runner, sample)
    expected = processor(text=[text], images=images, return_tensors="pt").input_ids[0]
    image_id = tokenizer.convert_tokens_to_ids(image_token)
    embed = model.get_input_embeddings()
    _check_context(drafter, sample.target, expected, image_id, ar, sd, embed)
    assert sample.target.positions is not None  # M-RoPE: positions differ from 0..L-1


# --- proposing nothing, stopping early ----------------------------------------------------------


class Silent(Drafter):
    """Proposes nothing, ever."""

    def start(self, prompts, first_token, target):
        pass

    def root(self, sampler):
        return None

    def commit(self, tree, path, next_token, target):
        assert (tree.tokens, path) == ([], [])


class ShallowOracle(Drafter):
    """Proposes the AR output as point masses (uniform off it) and stops at depth `stop`."""

    def __init__(self, answer: list[int], vocab: int, stop: int):
        super().__init__(0.0)
        self.answer, self.vocab, self.stop = answer, vocab, stop

    def start(self, prompts, first_token, target):
        self.done = 1

    def _after(self, tokens: list[int]) -> torch.Tensor:
        at = self.done + len(tokens)
        if at < len(self.answer) and tokens == self.answer[self.done : at]:
            return _point_mass(self.answer[at], self.vocab)
        return torch.full((self.vocab,), 1.0 / self.vocab)

    def root(self, sampler):
        return self._after([])

    def expand(self, tree, nodes):
        paths = [
            [tree.tokens[a] for a in tree.ancestors(n)[::-1]] + [tree.tokens[n]] for n in nodes
        ]
        if max(len(p) for p in paths) >= self.stop:
            return None
        return torch.stack([self._after(p) for p in paths])

    def commit(self, tree, path, next_token, target):
        self.done += len(path) + 1


def _visual_prompt(processor, target_model):
    """A prompt with visual tokens (LVSpec compares drafts with them)."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(16, target_model.config.vision_config.hidden_size, generator=g)
    with torch.no_grad():
        embeds = projector_of(target_model)(features)
    ctx = ViewContext(processor.tokenizer, target_model.get_input_embeddings(), "<image>")
    return FullView().build(
        "<bos> user : <image> describe the image . assistant :", [ImageInput(embeds)], ctx
    )


def _rule(name: str, vocab: int):
    values = {}
    # values that would relax nearly every mismatch, had anything been drafted
    if name == "random_relax":
        values["relax_rho"] = 0.9
    if name == "lantern":
        values.update(lantern_k=3, lantern_delta=0.9)
    codebook = (torch.randn(vocab, 4, generator=torch.Generator().manual_seed(0)), 0)
    rule = part("acceptance", name, **values)
    return rule.build(codebook=codebook if name == "lantern" else None)


@pytest.mark.parametrize(
    ("rule", "temperature"),
    [(r, 0.0) for r in RULES] + [(r, 1.0) for r in RULES if r != "greedy"],  # greedy: T 0 only
)
def test_proposing_nothing_is_ar_under_every_policy_and_rule(
    processor, target_model, rule, temperature
):
    """Each step verifies the last token alone and emits the target's own next token: greedy,
    its argmax; sampling, a draw from p, the very draw AR makes with the same sampler."""
    prompt = _visual_prompt(processor, target_model)
    vocab = target_model.get_output_embeddings().out_features
    ar = decode_ar(Decoder(target_model), prompt, MAX_NEW, set(), temperature, seeded(3))
    for name, policy in _policies().items():
        sd = decode_speculative(
            Decoder(target_model),
            prompt,
            Silent(temperature),
            [],
            policy,
            _rule(rule, vocab),
            MAX_NEW,
            set(),
            temperature,
            seeded(3),
        )
        assert sd.tokens == ar.tokens, name
        assert len(sd.steps) == MAX_NEW - 1
        assert {(s.drafted, s.accepted, s.depth, s.width, s.relaxed) for s in sd.steps} == {
            (0, 0, 0, 0, 0)
        }


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_judges_an_empty_proposal_as_the_target(rule):
    """By exact enumeration of the rule's random choices: its next token is distributed as p
    (temperature 1), and is the argmax at temperature 0."""
    vocab = 8
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    judge = _rule(rule, vocab)
    states = {}
    if judge.reads_hidden:
        states = {"hidden": torch.zeros(0, 4), "visual": torch.randn(3, 4)}
    empty = Proposal.chain([])
    assert empty.is_chain and empty.attention() is None and empty.shape() == (0, 0)
    assert judge(empty, logits, 0.0, None, **states) == ([], int(logits[0].argmax()))
    if rule == "greedy":
        return  # greedy acceptance runs at temperature 0 only (the registry refuses more)
    got = {}
    for p, (path, token) in outcomes(lambda s: judge(empty, logits, 1.0, s, **states)):
        assert path == []
        got[token] = got.get(token, 0.0) + p
    p = distribution(logits[0], 1.0).tolist()
    assert got.keys() <= set(range(vocab))
    assert max(abs(got.get(t, 0.0) - p[t]) for t in range(vocab)) < 1e-12


def _greedy(target_model, prompt, drafter, policy):
    """A greedy speculative generation of `prompt` with `drafter` and `policy`."""
    rule = part("acceptance", "greedy").build()
    return decode_speculative(
        Decoder(target_model), prompt, drafter, [], policy, rule, MAX_NEW, set(), 0.0, seeded(0)
    )


def test_every_policy_stops_where_expand_returns_none(processor, target_model):
    """An `expand` of None ends the proposal at every policy: no node below depth 2 (chain 5,
    EAGLE's tree and SAGE's reach 5, the dynamic tree 5), and greedy still equals AR."""
    prompt = _visual_prompt(processor, target_model)
    vocab = target_model.get_output_embeddings().out_features
    ar = decode_ar(Decoder(target_model), prompt, MAX_NEW, set(), 0.0, None)
    for name, policy in _policies().items():
        drafter = ShallowOracle(ar.tokens, vocab, stop=2)
        sd = _greedy(target_model, prompt, drafter, policy)
        assert sd.tokens == ar.tokens, name
        assert max(s.depth for s in sd.steps) == 2, name
        assert all(s.accepted == 2 for s in sd.steps[:-1]), name  # the oracle is right


def test_an_early_stop_keeps_a_sampled_chain_and_its_draft_distributions_aligned():
    """At temperature > 0 a chain cut short by `expand` keeps one q row per drafted token."""
    drafter = ShallowOracle([4, 5, 6, 7], 8, stop=2)
    drafter.temperature = 1.0
    drafter.start(None, 4, None)
    chain = ChainPolicy(5).propose(drafter, seeded(0), room=10)
    assert chain.tokens == [5, 6] and chain.parents == [ROOT, 0]
    assert chain.q.shape == (2, 8) and chain.q.argmax(-1).tolist() == [5, 6]


# --- what a drafter is handed where (the plugin API reference's answers) -------------------------


class Probe(Drafter):
    """Reads tokens; records what `check`, `from_spec`, `start` and `commit` are handed, and
    drafts uniform distributions built as the API asks (on the target's device, float32)."""

    name = "probe_of_tests"
    params = (Param("probe_value", int, 7, "a value of its own", low=0),)
    reads_tokens = True
    checked: dict = {}

    @classmethod
    def check(cls, spec):
        cls.checked = dict(spec)

    @classmethod
    def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
        drafter = cls(temperature)
        drafter.built = (dict(spec), target, draft, head)
        return drafter

    def start(self, prompts, first_token, target, tokens):
        self.started = (prompts, first_token, target, list(tokens.output))
        self.vocab, self.device = target.logits.shape[-1], target.logits.device
        self.commits = []

    def root(self, sampler):
        return torch.full((self.vocab,), 1.0 / self.vocab, device=self.device)

    def expand(self, tree, nodes):
        return torch.full((len(nodes), self.vocab), 1.0 / self.vocab, device=self.device)

    def commit(self, tree, path, next_token, target):
        self.commits.append((len(tree.tokens), list(path), target))


def test_a_drafter_gets_a_decoder_at_from_spec_and_forwards_at_start_and_commit(
    monkeypatch, processor, target_model
):
    """`check` gets the method's whole resolved spec, `from_spec` its own values and the
    target's Decoder; `start` the prefill's Forward for the one row (logits [V], hidden
    [L, H]) with the committed tokens holding the first token; `commit` the verification's
    Forward at the root and each accepted node."""
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", Probe.name), Probe)
    spec = registry.resolve("sd_chain", {"drafter": Probe.name, "gamma": 3, "probe_value": 2})
    assert Probe.checked == {
        "method": "sd_chain",
        "drafter": Probe.name,
        "temperature": 0.0,
        "tree": "chain",
        "acceptance": "greedy",
        "gamma": 3,
        "probe_value": 2,
    }
    tokenizer = processor.tokenizer
    runner = MethodRunner(spec, target_model, None, tokenizer, "<image>")
    sample = Sample("<bos> user : describe the image . assistant : a red", [], [])
    ar = runner.decode_ar(sample, MAX_NEW, set(), None)
    sd = runner.decode(sample, MAX_NEW, set(), seeded(0))
    assert sd.tokens == ar.tokens
    drafter = runner.drafter
    values, target, draft, head = drafter.built
    assert values == {"probe_value": 2} and (draft, head) == (None, None)
    assert isinstance(target, Decoder) and target is runner.target
    assert target.lm_head is target_model.lm_head and callable(target.head_logits)
    prompts, first, forward, output = drafter.started
    prompt = sample.target
    assert isinstance(forward, Forward) and not isinstance(forward, Decoder)
    vocab, hidden = target_model.config.text_config.vocab_size, forward.hidden.shape[-1]
    assert forward.logits.shape == (vocab,) and forward.hidden.shape == (len(prompt), hidden)
    assert first == sd.tokens[0] and output == [first]  # the committed tokens, at start
    assert isinstance(prompts, HeadPrompts) and prompts[0] is prompt
    assert len(drafter.commits) == len(sd.steps)
    for (nodes, path, verified), step in zip(drafter.commits, sd.steps, strict=True):
        assert isinstance(verified, Forward) and nodes == step.drafted
        assert verified.logits.shape == (1 + len(path), vocab)
        assert verified.hidden.shape == (1 + len(path), hidden)


class ZeroOffPath(ShallowOracle):
    """Half its mass on the AR output's next token, a quarter on each of two others; after a
    node off the AR output, a row of zeros (no continuation). Records the zeroed nodes and each
    step's proposal."""

    def __init__(self, answer: list[int], vocab: int):
        super().__init__(answer, vocab, stop=10**6)
        self.proposals = []

    def _after(self, tokens: list[int]) -> torch.Tensor:
        at = self.done + len(tokens)
        q = torch.zeros(self.vocab)
        if at < len(self.answer) and tokens == self.answer[self.done : at]:
            token = self.answer[at]
            q[token] = 0.5
            q[(token + 1) % self.vocab] = q[(token + 2) % self.vocab] = 0.25
        return q

    def root(self, sampler):
        self.zeroed, self.grown = set(), None
        return super().root(sampler)

    def expand(self, tree, nodes):
        self.grown = tree  # what the policy grows (a dynamic tree proposes a subset of it)
        q = super().expand(tree, nodes)
        self.zeroed |= {n for n, row in zip(nodes, q, strict=True) if not row.any()}
        return q

    def commit(self, tree, path, next_token, target):
        self.proposals.append((tree, self.grown or tree, set(self.zeroed)))
        super().commit(tree, path, next_token, target)


def _under_zeroed(tree, zeroed: set[int]) -> set[int]:
    """The nodes of a grown tree whose parent's continuation was a row of zeros."""
    return {n for n, parent in enumerate(tree.parents) if parent in zeroed}


def test_a_row_of_zeros_is_a_node_without_a_continuation(processor, target_model):
    """Every policy keeps greedy decoding exact; SAGE (after its first step, EAGLE's static
    tree) takes no child of a zeroed node, EAGLE-2's dynamic tree keeps one only once every
    other candidate is kept, and a static tree still adds its ranked nodes (the target verifies
    them: wasted, never wrong)."""
    prompt = _visual_prompt(processor, target_model)
    vocab = target_model.get_output_embeddings().out_features
    ar = decode_ar(Decoder(target_model), prompt, MAX_NEW, set(), 0.0, None)
    under, outranked = {}, []
    for name, policy in _policies().items():
        drafter = ZeroOffPath(ar.tokens, vocab)
        sd = _greedy(target_model, prompt, drafter, policy)
        assert sd.tokens == ar.tokens, name
        first = 1 if name == "sage" else 0
        assert name == "chain" or any(z for *_, z in drafter.proposals[first:]), name
        under[name] = 0
        for tree, grown, zeroed in drafter.proposals[first:]:
            kept = {tree.drafted_index(i) for i in range(len(tree.tokens))}
            below = _under_zeroed(grown, zeroed)
            under[name] += len(kept & below)
            others = set(range(len(grown.tokens))) - below
            if kept & below and not others <= kept:  # one kept before another candidate
                outranked.append(name)
    assert under["sage"] == under["chain"] == 0 and outranked == []
    assert under["static"] > 0
