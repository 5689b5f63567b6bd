"""Our decoding engine vs Hugging Face `generate`, on the same Llava pair, samples and pixels.

Four runners, timed in one process on the same samples (greedy, batch 1):
  ours_ar      mmspec `decode_ar` over a `Decoder` of the target
  hf_generate  `target.generate(do_sample=False)`
  ours_sd      mmspec `decode_speculative`: `ModelDrafter` (draft, view M), chain(gamma), greedy
  hf_assisted  `target.generate(assistant_model=draft)`, gamma draft tokens per step, constant

Fairness. Images are preprocessed once by the processor (untimed); every runner starts from those
pixel_values. Our runners' time includes encoding the images with each model's own vision tower
(`visual.encode_images`), building the prompt embeddings (tokenising the text too, which HF gets
done for free) and prefill, as `generate` runs the vision tower inside. Same max_new_tokens and stop
tokens. Each runner is warmed up on 2 samples; then per sample the four run back to back in an
order rotated per sample, so drift in machine speed hits all alike.

HF assisted generation with a Llava assistant (transformers 5.23) silently drops the draft's image:
the target pre-encodes the pixels into `mm_encoder_outputs` and pops `pixel_values` before
assisted decoding, and the assistant's inner `generate` runs with `is_first_iteration=False`, so
the draft never runs its vision tower and sees bare `<image>` token embeddings. No error, just a
weaker (imageless) draft. Workaround: a forward pre-hook on the draft's LlavaModel passes it the
sample's pixel_values while its cache is empty (the prompt prefill), so it drafts from view M like
ours; `check_assistant_view` verifies that the draft's prompt embeddings then equal ours.

All four are greedy on the same target, so outputs must match token for token: exit status 1 if
ours differ from HF greedy. Wall-clock times are noisy on shared machines; quote the ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from mmspec.decoding.acceptance import accept_greedy  # noqa: E402
from mmspec.decoding.decoder import Decoder  # noqa: E402
from mmspec.decoding.drafters import ModelDrafter  # noqa: E402
from mmspec.decoding.loops import decode_ar, decode_speculative  # noqa: E402
from mmspec.decoding.timing import describe_device, pick_device, sync, versions  # noqa: E402
from mmspec.decoding.trees import ChainPolicy  # noqa: E402
from mmspec.decoding.views import FullView  # noqa: E402
from mmspec.models import loading, visual  # noqa: E402
from mmspec.stages.generate import stop_tokens  # noqa: E402
from mmspec.tables import PREPARED, read_table  # noqa: E402

RUNNERS = ["ours_ar", "hf_generate", "ours_sd", "hf_assisted"]


class Bench:
    def __init__(self, args, device):
        self.processor = loading.load_processor(args.target)
        self.tokenizer = loading.tokenizer_of(self.processor)
        self.image_token = loading.image_token_of(self.processor)
        self.target = loading.load_model(args.target, device)
        self.draft = loading.load_model(args.draft, device)
        self.max_new = args.max_new_tokens
        self.stop = stop_tokens(self.target, self.tokenizer)
        self.hf_kwargs = {
            "do_sample": False,
            "max_new_tokens": self.max_new,
            "eos_token_id": sorted(self.stop),
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        config = self.draft.generation_config
        config.num_assistant_tokens = args.gamma
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        self.t_dec, self.view, self.policy = Decoder(self.target), FullView(), ChainPolicy(args.gamma)
        self.drafter = ModelDrafter(Decoder(self.draft), temperature=0.0)
        self.device = device
        self.hf_target_forwards = 0

    def sample(self, row: dict) -> dict:
        messages = json.loads(row["messages"])
        text = self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in row["images"]]
        inputs = self.processor(images=images or None, text=text, return_tensors="pt")
        return {"text": text, "inputs": inputs.to(self.device)}

    def prompt(self, model, decoder: Decoder, s: dict) -> torch.Tensor:
        """Pixels -> this model's image embeddings -> view M prompt embeddings."""
        pixels = s["inputs"].get("pixel_values")
        images = list(visual.encode_images(model, pixels)[1]) if pixels is not None else []
        built = self.view.build(s["text"], images, self.tokenizer, decoder.embed, self.image_token)
        return built.embeds

    def ours_ar(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        return decode_ar(self.t_dec, prompt, self.max_new, self.stop, 0.0, None)

    def ours_sd(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        draft_prompt = self.prompt(self.draft, self.drafter.decoder, s)
        return decode_speculative(
            self.t_dec, prompt, self.drafter, draft_prompt, self.policy, accept_greedy,
            self.max_new, self.stop, 0.0, None,
        )  # fmt: skip

    def hf_generate(self, s):
        out = self.target.generate(**s["inputs"], **self.hf_kwargs)
        return out[0, s["inputs"]["input_ids"].shape[1] :].tolist()

    def hf_assisted(self, s, spy=None):
        pixels = s["inputs"].get("pixel_values")

        def feed_pixels(module, args, kwargs):  # the workaround (see the docstring)
            cache = kwargs.get("past_key_values")
            if pixels is not None and (cache is None or cache.get_seq_length() == 0):
                kwargs.update(pixel_values=pixels, mm_encoder_outputs=None)
            return args, kwargs

        def count(module, args, kwargs):
            self.hf_target_forwards += 1

        hooks = [
            self.draft.model.register_forward_pre_hook(feed_pixels, with_kwargs=True),
            self.target.model.language_model.register_forward_pre_hook(count, with_kwargs=True),
        ]
        if spy is not None:
            hooks.append(self.draft.model.language_model.register_forward_pre_hook(spy, with_kwargs=True))
        try:
            out = self.target.generate(**s["inputs"], assistant_model=self.draft, **self.hf_kwargs)
        finally:
            for hook in hooks:
                hook.remove()
        return out[0, s["inputs"]["input_ids"].shape[1] :].tolist()

    def check_assistant_view(self, s) -> None:
        """The HF assistant's prompt embeddings must equal our draft's view M (image included)."""
        seen = []
        self.hf_assisted(s, spy=lambda m, a, k: seen.append(k["inputs_embeds"][0].clone()))
        ours = self.prompt(self.draft, self.drafter.decoder, s)
        if seen[0].shape != ours.shape or not torch.allclose(seen[0], ours, atol=1e-5):
            sys.exit("HF assistant does not see the same draft prompt (image) as ours; see docstring")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="results/models/toy/target")
    p.add_argument("--draft", default="results/models/toy/draft")
    p.add_argument("--prepared", default="results/prepared/toy_caption.parquet")
    p.add_argument("--gamma", type=int, default=5)
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", help="also write the numbers here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    device = pick_device()
    bench = Bench(args, device)
    rows = read_table(args.prepared, PREPARED).to_pylist()[: args.samples]
    samples = [bench.sample(row) for row in rows]

    def timed(name, s):
        sync(device)
        start = time.perf_counter()
        out = getattr(bench, name)(s)
        sync(device)
        return out, time.perf_counter() - start

    secs, toks = dict.fromkeys(RUNNERS, 0.0), dict.fromkeys(RUNNERS, 0)
    mismatch = dict.fromkeys(["ours_ar", "ours_sd", "hf_assisted"], 0)
    steps = []
    with torch.inference_mode():
        bench.check_assistant_view(samples[0])
        for s in samples[: args.warmup]:
            for name in RUNNERS:
                timed(name, s)
        bench.hf_target_forwards = 0
        for i, s in enumerate(samples):
            order = RUNNERS[i % 4 :] + RUNNERS[: i % 4]
            out = {}
            for name in order:
                result, seconds = timed(name, s)
                if name.startswith("ours"):
                    steps += result.steps if name == "ours_sd" else []
                    result = result.tokens
                out[name], secs[name] = result, secs[name] + seconds
                toks[name] += len(result)
            for name in mismatch:
                mismatch[name] += out[name] != out["hf_generate"]

    sd_forwards = len(samples) + len(steps)  # one prefill per sample + one per verification
    report = {
        "runners": {
            n: {"seconds": secs[n], "tokens": toks[n], "tokens_per_s": toks[n] / secs[n]}
            for n in RUNNERS
        },
        "ratios": {
            "ours_ar_over_hf_generate": secs["ours_ar"] / secs["hf_generate"],
            "ours_sd_over_hf_assisted": secs["ours_sd"] / secs["hf_assisted"],
            "ours_sd_speedup": secs["ours_ar"] / secs["ours_sd"],
            "hf_assisted_speedup": secs["hf_generate"] / secs["hf_assisted"],
        },
        "tau": sum(s.accepted + 1 for s in steps) / max(len(steps), 1),
        "tokens_per_target_forward": {
            "ours_sd": toks["ours_sd"] / sd_forwards,
            "hf_assisted": toks["hf_assisted"] / max(bench.hf_target_forwards, 1),
        },
        "mismatches_vs_hf_generate": mismatch,
        "samples": len(samples),
        "args": vars(args),
        "device": describe_device(device),
        "versions": json.loads(versions()),
    }
    print(f"{len(samples)} samples, gamma {args.gamma}, max_new_tokens {args.max_new_tokens}, "
          f"{report['device']}")  # fmt: skip
    print(f"{'runner':<12} {'seconds':>9} {'tokens':>7} {'tokens/s':>9}")
    for n, r in report["runners"].items():
        print(f"{n:<12} {r['seconds']:>9.3f} {r['tokens']:>7d} {r['tokens_per_s']:>9.1f}")
    for name, value in report["ratios"].items():
        print(f"{name:<26} {value:6.3f}")
    per_fwd = report["tokens_per_target_forward"]
    print(f"ours_sd tau (tokens per verification) {report['tau']:.2f}; tokens per target forward:"
          f" ours_sd {per_fwd['ours_sd']:.2f}, hf_assisted {per_fwd['hf_assisted']:.2f}")  # fmt: skip
    print("mismatches vs hf_generate (samples):", mismatch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if mismatch["ours_ar"] or mismatch["ours_sd"] else 0


if __name__ == "__main__":
    sys.exit(main())
