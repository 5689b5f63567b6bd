"""The device contract of random draws, as far as a CPU can see it.

Every draw is taken on the CPU from an explicit CPU generator, and only then meets the device
the models run on: so a seed draws the same numbers on a CPU and a GPU, and torch never sees a
CPU generator over CUDA tensors (which it refuses). `DrawAudit` holds each draw to that while
(1) the sampler serves probabilities faked onto a CUDA device, and (2) sampled decodes of every
method family, the image generators' sampled draws, and a head's noisy training run for real.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from draw_audit import DrawAudit, DrawViolation
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from mmspec.decoding.drafters.heads import build_head
from mmspec.decoding.sampler import TorchSampler, seeded
from mmspec.methods import registry, verify
from mmspec.methods.components import head_drafters
from mmspec.methods.image_runner import ImageMethodRunner
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.methods.spec import MethodSpec
from mmspec.models.image_generation import ImageGenerator
from mmspec.training.heads import collect_sequence, train_head


def _on_fake_cuda(fn):
    """`fn(probabilities on a fake CUDA device)` under the audit; its result, or None where the
    method reads a drawn value back (fake tensors hold no values: the draw itself was checked)."""
    with FakeTensorMode(), DrawAudit() as audit:
        probs = torch.full((6,), 1 / 6, device="cuda")
        try:
            out = fn(probs)
        except DataDependentOutputException:
            out = None
        except RuntimeError as err:  # a value read back from a fake CUDA tensor
            if "not linked with support for cuda" not in str(err):
                raise
            out = None
    assert audit.draws, "the method drew nothing"
    return out


@pytest.mark.parametrize(
    "draw",
    [
        lambda s, p: s.categorical(p),
        lambda s, p: s.first_rejection(p),
        lambda s, p: s.coins(p),
        lambda s, p: s.graded_first_rejection(p * 0.5, p),
    ],
    ids=["categorical", "first_rejection", "coins", "graded_first_rejection"],
)
def test_the_sampler_draws_on_the_cpu_for_probabilities_on_a_gpu(draw):
    out = _on_fake_cuda(lambda probs: draw(seeded(0), probs))
    if isinstance(out, torch.Tensor):  # coins come back where the probabilities are
        assert out.device.type == "cuda"


def test_the_audit_refuses_what_a_gpu_refuses():
    """The watch is not vacuous: a CPU generator over CUDA probabilities, and a draw from the
    global generator, are caught."""
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(DrawViolation, match="cuda"), FakeTensorMode(), DrawAudit():
        torch.multinomial(torch.full((6,), 1 / 6, device="cuda"), 1, generator=generator)
    with pytest.raises(DrawViolation, match="global generator"), DrawAudit():
        torch.rand(3)


def test_a_sampler_refuses_a_generator_off_the_cpu():
    # a CUDA generator cannot be built without a GPU; the sampler reads only its device
    cuda_generator = SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(ValueError, match="draws on the CPU"):
        TorchSampler(cuda_generator)


# One sampled method of every family: chains drawn from q, static/dynamic/SAGE trees, SpecVLM's
# pruned view, ensembles (random weights draw a Dirichlet per block), the loose rules, heads.
SAMPLED = [
    ("sd_chain", {"acceptance": "sampling", "gamma": 3}),
    ("sd_tree", {"acceptance": "sampling"}),
    ("eagle2_tree", {"acceptance": "sampling", "depth": 2, "top_k": 3, "total_tokens": 8}),
    ("sage_tree", {"acceptance": "sampling"}),
    ("specvlm", {"acceptance": "sampling"}),
    ("random_mt", {"acceptance": "sampling"}),
    ("tabed_mt", {"acceptance": "sampling"}),
    ("lvspec", {}),
    ("fly", {}),
    ("random_relax", {}),
    ("eagle", {"acceptance": "sampling"}),
    ("eagle2", {"acceptance": "sampling", "depth": 2, "top_k": 3, "total_tokens": 8}),
    ("medusa", {"acceptance": "sampling"}),
    ("kangaroo", {"acceptance": "sampling", "kangaroo_layers": 1}),
    ("dream", {"acceptance": "sampling"}),
]


@pytest.fixture(scope="module")
def tiny():
    tokenizer = verify.build_tokenizer()
    target, draft = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    prompts = ["a b <image> c", "<image> c a"]
    samples = [
        Sample(t, verify.random_images(target, generator), verify.random_images(draft, generator))
        for t in prompts
    ]
    return tokenizer, target, draft, samples


@pytest.mark.parametrize("method, hparams", SAMPLED, ids=[m for m, _ in SAMPLED])
def test_sampled_decoding_draws_only_from_seeded_cpu_generators(tiny, method, hparams):
    tokenizer, target, draft, samples = tiny
    spec = _sampled(method, hparams)
    head = None
    if spec.drafter in head_drafters():
        torch.manual_seed(1)
        head = build_head(spec.drafter, target.config, spec.head_training(), "tiny").double().eval()
    runner = MethodRunner(spec, target, draft, tokenizer, "<image>", head=head)
    with DrawAudit() as audit:
        for sample in samples:
            runner.decode(sample, 12, set(), seeded(0))
            runner.decode_ar(sample, 12, set(), seeded(1))
    assert any(name == "multinomial" for name, _, _ in audit.draws)


def _sampled(method: str, hparams: dict) -> MethodSpec:
    """`method` at temperature 1 (a head drafter names a training set, unused here)."""
    head = registry.METHODS[method].defaults["drafter"] in head_drafters()
    return registry.resolve(method, {**hparams, **({"head_data": "x"} if head else {})}, 1.0)


def test_image_generators_draw_only_from_seeded_cpu_generators(imagegen_dirs):
    target, draft = (ImageGenerator.load(str(d), torch.device("cpu")) for d in imagegen_dirs)
    caption = "a red circle top left ."
    for method, hparams in [
        ("ar", {}),
        ("sd_chain", {"acceptance": "sampling", "gamma": 3}),
        ("lantern", {"lantern_k": 4}),
    ]:
        runner = ImageMethodRunner(_sampled(method, hparams), target, target, 3.0, top_k=8)
        with DrawAudit() as audit:
            runner.decode(runner.prompt(caption), seeded(5))
        assert any(name == "multinomial" for name, _, _ in audit.draws), method


def test_head_training_draws_its_noise_from_a_seeded_cpu_generator(tiny):
    tokenizer, target, _, samples = tiny
    runner = MethodRunner(registry.resolve("ar", {}), target, None, tokenizer, "<image>")
    sequences = []
    for sample in samples * 2:
        answer = runner.decode_ar(sample, 8, set(), seeded(0)).tokens
        sequences.append(collect_sequence(runner.target, runner.target_prompt(sample), answer))
    spec = registry.resolve("eagle", {"head_data": "x"})
    torch.manual_seed(1)
    head = build_head("eagle", target.config, spec.head_training(), "tiny").float()
    lm_head = torch.nn.Linear(target.config.text_config.hidden_size, len(verify.WORDS))
    training = {**spec.head_training(), "head_steps": 3}
    with DrawAudit() as audit:
        train_head(head, lm_head, sequences, {**training, "head_noise": 0.2}, seed=0)
    assert any(name == "rand" for name, _, _ in audit.draws)
