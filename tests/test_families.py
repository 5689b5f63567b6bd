"""Every supported VLM family runs through mmspec exactly as through its own transformers code.

For tiny random-init models of each family (built offline, saved and loaded like hub models):
(a) mmspec's prefill logits equal the HF model's own forward on pixels, and its AR output equals
the model's own greedy `generate()`; (b) greedy SD over a chain and over trees equals AR;
(c) the visual cache, spliced in by the family's own merge, gives the logits of the forward on
pixels. Random models make greedy tokens nearly context-free, so logits are compared as well
as tokens, and tree verification is checked logit by logit against sequential decoding.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from PIL import Image

from mmspec.data import media
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.loops import decode_ar
from mmspec.decoding.sampler import seeded
from mmspec.methods.registry import resolve
from mmspec.models import families, loading, video_processing, visual
from mmspec.models.prompts import PromptBuilder
from mmspec.stages import cache_visual, generate, prepare
from mmspec.toy import tiny

FAMILIES = tiny.FAMILIES
MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "image"},
            {"type": "text", "text": "what changed ?"},
            {"type": "image"},
        ],
    }
]


def _images(seed: int) -> list[Image.Image]:
    """Two images of different sizes (tiles, variable patch grids)."""
    rng = np.random.default_rng(seed)
    sizes = [(48, 32), (32, 64)]
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    dirs = {}
    for family in FAMILIES:
        dirs[family] = (
            tiny.save(family, root / family, seed=0),
            tiny.save(family, root / f"{family}_draft", layers=1, seed=1),
        )
    return dirs


def _load(path):
    model = loading.load_model(str(path), torch.device("cpu"))
    return model, loading.load_processor(str(path))


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_matches_the_model_and_ar_matches_generate(family, family_dirs):
    model, processor = _load(family_dirs[family][0])
    images = _images(0)
    text = processor.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        reference = model(**inputs).logits[0, -1]
    cached = [visual.encode_image(model, processor.image_processor, image) for image in images]
    prompt = PromptBuilder(model, processor).build(text, images, cached)
    decoder = Decoder(model)
    logits = decoder.prefill(prompt).logits[0]
    assert (logits - reference).abs().max() <= 1e-4
    ours = decode_ar(decoder, prompt, 11, set(), 0.0, seeded(0)).tokens
    with torch.no_grad():
        theirs = model.generate(
            **inputs, max_new_tokens=len(ours), do_sample=False, eos_token_id=None
        )
    assert ours == theirs[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_verification_matches_sequential_decoding(family, family_dirs):
    """One forward over a token tree (with M-RoPE, sliding windows and image blocks where the
    family has them) gives each node the logits sequential decoding gives its path."""
    model, processor = _load(family_dirs[family][0])
    images = _images(1)
    text = processor.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    cached = [visual.encode_image(model, processor.image_processor, image) for image in images]
    prompt = PromptBuilder(model, processor).build(text, images, cached)
    path = [5, 9, 7, 11, 6, 8, 10, 12, 13]  # longer than Gemma3's tiny sliding window (8)
    sequential = Decoder(model)
    sequential.prefill(prompt)
    expected = torch.cat([sequential.extend([t]).logits[0] for t in path])
    tree = Decoder(model)
    tree.prefill(prompt)
    tree.extend(path[:3])
    # the rest as a tree: the path plus a sibling at every depth (parents = path nodes)
    tokens, parents = [], []
    for depth, token in enumerate(path[3:]):
        for candidate in (token, token + 20):
            tokens.append(candidate)
            parents.append(2 * (depth - 1) if depth else -1)
    attention = torch.zeros(len(tokens), len(tokens), dtype=torch.bool)
    for node, parent in enumerate(parents):
        attention[node, node] = True
        if parent >= 0:
            attention[node] |= attention[parent]
    base = tree.length
    out = tree.extend(tokens, attention=attention).logits[0]
    on_path = list(range(0, len(tokens), 2))
    torch.testing.assert_close(out[on_path], expected[3:], atol=1e-5, rtol=1e-5)
    tree.keep(base, on_path)
    after = tree.extend([14]).logits[0, -1]
    torch.testing.assert_close(after, sequential.extend([14]).logits[0, -1], atol=1e-5, rtol=1e-5)


def _cell(method: str, hparams: dict, pair: dict) -> dict:
    spec = resolve(method, hparams).to_dict()
    return {
        "cell": {
            "dataset": "toy_diff",
            "pair": "tiny",
            "method": method,
            "hp": json.dumps(hparams),
            "seed": 0,
            "spec": spec,
        },
        "pair": pair,
        "generation": {"max_new_tokens": 10},
        "timing": {"warmup_samples": 0, "threads": 1},
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_stages_run_the_family_losslessly(family, family_dirs, tmp_path, monkeypatch):
    """prepare -> cache_visual -> generate; SD (chain, trees, pruned views) == AR ==
    the model's own generate(); the same model as draft accepts whole proposals."""
    monkeypatch.chdir(tmp_path)
    target_dir, draft_dir = family_dirs[family]
    prepare.run("toy_diff", {"source": "toy", "samples": 2}, "prepared.parquet", toy_seed=0)
    for name, path in (("target", target_dir), ("draft", draft_dir)):
        cache_visual.run(str(path), "prepared.parquet", f"{name}.parquet", "float32", 1)
    pairs = {
        "small": {"target": str(target_dir), "draft": str(draft_dir), "dtype": "float32"},
        "self": {"target": str(target_dir), "draft": str(target_dir), "dtype": "float32"},
    }
    cells = [
        ("ar", {}, "small"),
        ("sd_chain", {"gamma": 3}, "small"),
        ("sd_tree", {}, "small"),
        ("sd_chain", {"gamma": 4}, "self"),
        ("eagle2_tree", {}, "self"),
        ("sd", {"views": "U", "keep": 0.5, "gamma": 3}, "self"),
        ("specvlm", {}, "self"),
        ("sd", {"views": "MT", "gamma": 2}, "small"),
    ]
    outputs = {}
    for k, (method, hparams, pair) in enumerate(cells):
        draft_cache = "target.parquet" if pair == "self" else "draft.parquet"
        params = _cell(method, hparams, pairs[pair])
        generate.run(params, "prepared.parquet", "target.parquet", draft_cache, f"{k}.parquet")
        outputs[k] = pq.read_table(f"{k}.parquet").to_pylist()
    ar = [r["output_ids"] for r in outputs[0]]
    for k in outputs:
        assert [r["output_ids"] for r in outputs[k]] == ar, cells[k]
    # the same model drafting from its full view is right at every drafted position
    full = outputs[3]
    assert all(a == 4 for r in full for a in r["step_accepted"][:-1])

    model, processor = _load(target_dir)
    prepared = pq.read_table("prepared.parquet").to_pylist()
    eos = processor.tokenizer.eos_token_id
    for row, ours in zip(prepared, ar, strict=True):
        messages = json.loads(row["messages"])
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        images = [Image.open(__import__("io").BytesIO(png)).convert("RGB") for png in row["images"]]
        inputs = processor(text=[text], images=images, return_tensors="pt")
        with torch.no_grad():
            theirs = model.generate(
                **inputs, max_new_tokens=len(ours), do_sample=False, eos_token_id=eos
            )
        assert ours == theirs[0, inputs["input_ids"].shape[1] :].tolist()


VIDEO_FAMILIES = [f for f in FAMILIES if families.FAMILIES[f].video]
# video tokens of 8 frames of 32x32 in each tiny family's own video path: OneVision pools each
# frame's 4x4 patches to 2x2 and adds one newline token; NeXT-Video's resampler pools 4x4 to 2x2;
# Qwen merges temporal pairs of frames (4) and 2x2 patches of the 4x4 grid (4 each)
VIDEO_TOKENS = {"llava_onevision": 8 * 4 + 1, "llava_next_video": 8 * 4, "qwen2_vl": 4 * 4}
VIDEO_TOKENS["qwen2_5_vl"] = VIDEO_TOKENS["qwen2_vl"]


def _frames(seed: int, n: int = 8) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)]


def test_every_family_with_a_video_path_is_tested():
    assert set(VIDEO_FAMILIES) == set(VIDEO_TOKENS)
    assert set(VIDEO_FAMILIES) <= set(video_processing.DEFAULTS)


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_video_prompt_matches_the_models_own_video_path(family, family_dirs):
    """An image and a video in one prompt: the cached video features (the family's pooling,
    resampler or temporal patches) give the logits of the model's forward on the same pixels,
    and AR equals its own generate()."""
    model, processor = _load(family_dirs[family][0])
    image, frames = _images(2)[0], _frames(3)
    messages = [{"role": "user", "content": [{"type": "image"}, media.video_item(len(frames))]}]
    messages[0]["content"].append({"type": "text", "text": "describe the motion ."})
    builder = PromptBuilder(model, processor)
    text = builder.render(messages)
    inputs = processor(text=[text], images=[image], videos=[frames], return_tensors="pt")
    with torch.no_grad():
        reference = model(**inputs).logits[0, -1]
    video = visual.encode_video(model, processor.video_processor, frames)
    assert video.shape[0] == VIDEO_TOKENS[family]
    cached = [visual.encode_image(model, processor.image_processor, image), video]
    prompt = builder.build(text, [image, frames], cached)
    decoder = Decoder(model)
    assert (decoder.prefill(prompt).logits[0] - reference).abs().max() <= 1e-4
    ours = decode_ar(decoder, prompt, 9, set(), 0.0, seeded(0)).tokens
    with torch.no_grad():
        theirs = model.generate(**inputs, max_new_tokens=len(ours), do_sample=False)
    assert ours == theirs[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("family", [*VIDEO_FAMILIES, "gemma3"])
def test_toy_video_decodes_losslessly(family, family_dirs, tmp_path, monkeypatch):
    """The toy video scenario (eight frames per sample): a family with a video path reads each
    as one video (its own pooling), the others as eight images; chain, tree and SpecVLM's pruned
    draft all reproduce AR."""
    monkeypatch.chdir(tmp_path)
    target_dir, _ = family_dirs[family]
    prepare.run("toy_video", {"source": "toy", "samples": 2}, "prepared.parquet", toy_seed=0)
    cache_visual.run(str(target_dir), "prepared.parquet", "target.parquet", "float32", 1)
    pair = {"target": str(target_dir), "draft": str(target_dir), "dtype": "float32"}
    outputs = []
    for k, (method, hparams) in enumerate(
        [("ar", {}), ("sd_chain", {"gamma": 3}), ("sd_tree", {}), ("specvlm", {})]
    ):
        params = _cell(method, hparams, pair)
        params["cell"]["dataset"] = "toy_video"
        generate.run(params, "prepared.parquet", "target.parquet", "target.parquet", f"{k}.parquet")
        outputs.append(pq.read_table(f"{k}.parquet").to_pylist())
    assert all(len(r["output_ids"]) > 1 for r in outputs[0])
    # gemma3 reads the frames as 8 images of 4 tokens each
    expected = VIDEO_TOKENS.get(family, 8 * 4)
    assert all(r["target_visual_tokens"] == expected for r in outputs[0])
    for rows in outputs[1:]:
        assert [r["output_ids"] for r in rows] == [r["output_ids"] for r in outputs[0]]


def test_a_text_only_draft_drafts_for_a_target_that_reads_videos(
    family_dirs, tmp_path, monkeypatch
):
    """View T of a text-only LM (sharing the target's tokenizer) over a prompt whose video the
    target reads as one video: the draft reads the chat with a newline per frame, and SD == AR."""
    import transformers

    monkeypatch.chdir(tmp_path)
    target_dir, _ = family_dirs["llava_onevision"]
    target, processor = _load(target_dir)
    text_config = type(target.config.text_config)(
        **{**target.config.text_config.to_dict(), "num_hidden_layers": 1, "layer_types": None}
    )
    transformers.AutoModelForCausalLM.from_config(text_config).save_pretrained("text_draft")
    processor.tokenizer.save_pretrained("text_draft")
    prepare.run("toy_video", {"source": "toy", "samples": 2}, "prepared.parquet", toy_seed=0)
    cache_visual.run(str(target_dir), "prepared.parquet", "target.parquet", "float32", 1)
    pair = {"target": str(target_dir), "draft": "text_draft", "dtype": "float32"}
    outputs = []
    for k, method in enumerate(["ar", "t"]):
        params = _cell(method, {}, pair)
        params["cell"]["dataset"] = "toy_video"
        generate.run(params, "prepared.parquet", "target.parquet", None, f"{k}.parquet")
        outputs.append(pq.read_table(f"{k}.parquet").to_pylist())
    assert [r["output_ids"] for r in outputs[1]] == [r["output_ids"] for r in outputs[0]]
    assert all(r["draft_visual_tokens"] == 0 for r in outputs[1])


def test_unknown_family_and_foreign_tokenizer_are_rejected_before_any_job(
    family_dirs, tmp_path, capsys
):
    from mmspec.cli import main
    from mmspec.sweep import config as mmconfig

    target = family_dirs["llava"][0]
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    model_config = json.loads((target / "config.json").read_text())
    model_config.update(model_type="paligemma", architectures=["PaliGemmaForConditionalGeneration"])
    (unknown / "config.json").write_text(json.dumps(model_config))
    base = yaml.safe_load(open("config/config.yaml"))

    def validate(target_ref, draft_ref):
        cfg = dict(base, pairs={"p": {"target": str(target_ref), "draft": str(draft_ref)}})
        # the checks are the pair's: one caption cell each (not the image world's methods)
        cfg["sweep"] = [
            {"datasets": ["toy_caption"], "pairs": ["p"], "methods": ["ar", "sd_chain"]}
        ]
        return mmconfig.validate(cfg)

    with pytest.raises(mmconfig.ConfigError, match="PaliGemmaForConditionalGeneration.*supported"):
        validate(unknown, target)
    foreign = family_dirs["idefics3"][0]
    with pytest.raises(mmconfig.ConfigError) as error:
        validate(target, foreign)
    # both vocabulary sizes named (they grow with the toy world's words)
    pattern = r"draft's tokenizer \((\d+) tokens\).*target's \((\d+) tokens\)"
    sizes = re.search(pattern, str(error.value))
    assert sizes and sizes[1] != sizes[2]
    assert validate(target, family_dirs["llava"][1])  # same family, same tokenizer
    # the stage itself: one line naming the model, no traceback
    prepare.run("toy_caption", {"source": "toy", "samples": 1}, str(tmp_path / "p.parquet"), 0)
    code = main(
        [
            "cache_visual",
            "--model",
            str(unknown),
            "--prepared",
            str(tmp_path / "p.parquet"),
            "--out",
            str(tmp_path / "v.parquet"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmspec cache_visual: error:") and len(err.splitlines()) == 1
    assert "'paligemma' (PaliGemmaForConditionalGeneration) is not supported" in err
