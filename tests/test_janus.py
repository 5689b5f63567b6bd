"""Janus (transformers' JanusForConditionalGeneration) as an image generator, on tiny random-init
models built offline: mmspec's guided AR is transformers' own image generation token for token,
greedy SD and LANTERN at delta 0 equal AR on image codes, and LANTERN's neighbour table builds
from the model's own VQ quantizer."""

from __future__ import annotations

import copy

import pytest
import torch
from head_jobs import image_head_job

from mmspec.decoding.acceptance.lantern import Neighbours
from mmspec.methods.image_runner import ImageMethodRunner
from mmspec.methods.registry import resolve
from mmspec.models.image_generation import ImageGenerator, JanusGenerator
from mmspec.toy import tiny

CPU = torch.device("cpu")
CAPTIONS = ["a red circle top left .", "two blue squares .", "a green triangle bottom right ."]
SCALE = 3.0
NETS = ("fid_features", "clip")  # the image-metric networks' toy kinds


@pytest.fixture(scope="module")
def janus(tmp_path_factory):
    root = tmp_path_factory.mktemp("janus")
    target = tiny.save_janus(root / "target", seed=0)
    draft = tiny.save_janus(root / "draft", layers=1, seed=1, vq_from=target)
    return ImageGenerator.load(str(target), CPU), ImageGenerator.load(str(draft), CPU)


def _hf_image_generation(generator: JanusGenerator, caption: str) -> list[int]:
    ids = torch.tensor([generator.prompts(caption)[0]])
    config = copy.deepcopy(generator.model.generation_config)
    config.generation_kwargs = {"boi_token_id": generator.boi}
    config.guidance_scale, config.do_sample = SCALE, False
    out = generator.model.generate(
        ids, attention_mask=torch.ones_like(ids), generation_mode="image", generation_config=config
    )
    return out[0].tolist()


def test_guided_ar_is_transformers_image_generation(janus):
    target, _ = janus
    assert isinstance(target, JanusGenerator) and target.grid == 16
    runner = ImageMethodRunner(resolve("ar", {}), target, None, SCALE)
    for caption in CAPTIONS:
        ours = runner.decode_ar(runner.prompt(caption), None).tokens
        assert ours == _hf_image_generation(target, caption)
    cond, uncond = target.prompts(CAPTIONS[0])
    assert len(cond) == len(uncond) and set(uncond) == {target.bos, target.pad, target.boi}


@pytest.mark.parametrize("method", ["sd_chain", "eagle2_tree"])
def test_greedy_sd_and_lossless_lantern_equal_ar_on_image_codes(janus, method):
    target, draft = janus
    assert target.shares_codes_with(draft)
    hparams = {"total_tokens": 6, "top_k": 3} if method == "eagle2_tree" else {"gamma": 3}
    lantern = {**hparams, "acceptance": "lantern", "lantern_k": 8, "lantern_delta": 0.0}
    runners = [
        ImageMethodRunner(resolve(method, spec), target, draft, SCALE)
        for spec in (hparams, lantern)
    ]
    rejected = 0
    for caption in CAPTIONS:
        ar = runners[0].decode_ar(runners[0].prompt(caption), None).tokens
        for runner in runners:
            out = runner.decode(runner.prompt(caption), None)
            assert out.tokens == ar, (method, caption)
            rejected += sum(s.accepted < s.depth for s in out.steps)
    assert rejected > 0  # the draft disagrees somewhere: the check is not vacuous


def test_lantern_neighbours_come_from_the_models_quantizer(janus):
    target, _ = janus
    vectors, offset = target.codebook()
    quantizer = target.model.model.vqmodel.quantize.embedding.weight
    assert offset == 0 and torch.equal(vectors, quantizer.detach().float())
    table = Neighbours(vectors, offset, 5, "l2")
    # the 5 nearest other codes of code 0, by L2 in the quantizer's latent space
    distances = torch.cdist(vectors[:1], vectors)[0]
    distances[0] = float("inf")
    assert set(table.of(0).tolist()) == set(distances.topk(5, largest=False).indices.tolist())
    lantern = resolve("lantern", {"lantern_k": 5}).part("acceptance")
    rule = lantern.build(codebook=target.codebook())
    assert rule.name == "lantern" and not rule.lossless


def test_a_local_janus_pair_validates_for_image_generation_only(janus):
    from mmspec.sweep import config as mmconfig
    from mmspec.sweep import model_refs

    target, draft = (str(g.model.name_or_path) for g in janus)
    cfg = {
        "datasets": {"toy_imagegen": {"source": "toy", "samples": 2}},
        "pairs": {"janus": {"target": target, "draft": draft}},
        "toy": {"models": {k: {"kind": k, "hidden": 16, "layers": 1, "steps": 1} for k in NETS}},
        "image_metrics": {k: f"toy:{k}" for k in NETS},
        "methods": {"ar": {}, "lantern": {"lantern_k": 8}},
    }
    assert model_refs.model_kind(mmconfig.validate(copy.deepcopy(cfg)), target) == "image_generator"
    cfg["datasets"] = {"toy_caption": {"source": "toy", "samples": 2}}
    cfg.pop("image_metrics")
    with pytest.raises(mmconfig.ConfigError, match="pair 'janus' generates images"):
        mmconfig.validate(cfg)


def test_an_eagle_head_trains_on_janus_and_drafts_its_codes_losslessly(tmp_path):
    """EAGLE's head over Janus's language model, read out by its generation head: trained on
    Janus's own guided draws, its greedy drafts reproduce AR code for code."""
    from mmspec.decoding.drafters.heads import build_head
    from mmspec.stages import prepare, train_drafter
    from mmspec.training.heads import train_head

    target_dir = str(tiny.save_janus(tmp_path / "target", seed=0))
    target = ImageGenerator.load(target_dir, CPU)
    prepared = tmp_path / "prepared.parquet"
    # enough draws that the head sees most codes: it drafts codes of captions it never saw
    prepare.run("toy_imagegen", {"source": "toy", "samples": 16}, str(prepared), 0)
    job = image_head_job(target_dir, SCALE)
    decoder, sequences = train_drafter.collect_images(job, str(prepared), CPU)
    assert len(sequences) == 16 * 4
    torch.manual_seed(0)
    eagle = resolve("eagle", {"head_data": "x"})
    head = build_head("eagle", decoder.model.config, eagle.head_training(), "j")
    training = {"head_steps": 120, "head_lr": 0.01, "head_batch_size": 4, "head_noise": 0.0}
    train_head(head, decoder.lm_head, sequences, training, seed=0)
    for method in ("eagle", "lantern_eagle"):
        hparams = {"lantern_k": 2, "lantern_delta": 0.0} if method == "lantern_eagle" else {}
        spec = resolve(method, {"head_data": "x", "tree": "chain", "gamma": 3, **hparams})
        runner = ImageMethodRunner(spec, target, None, SCALE, head=head.eval())
        accepted = 0
        for caption in CAPTIONS:
            prompt = runner.prompt(caption)
            sd = runner.decode(prompt, None)
            assert sd.tokens == runner.decode_ar(prompt, None).tokens
            accepted += sum(step.accepted for step in sd.steps)
        assert accepted > 0, method  # the head's drafts are accepted: the check is not vacuous
