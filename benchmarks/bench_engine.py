"""Our decoding engine vs Hugging Face `generate`, on the same Llava pair, samples and pixels.

Four runners, timed in one process on the same samples (greedy, batch 1):
  ours_ar      mmspec `decode_ar` over a `Decoder` of the target
  hf_generate  `target.generate(do_sample=False)`
  ours_sd      mmspec `decode_speculative`: `ModelDrafter` (draft, view M), chain(gamma), greedy
  hf_assisted  `target.generate(assistant_model=draft)`, gamma draft tokens per step, constant

Fairness. The processor prepares every sample once, untimed; all runners start from its
pixel_values. Our time includes encoding the images with each model's own vision tower
(`visual.encode_images`), building the prompt embeddings (tokenising the text too, which HF gets
for free) and prefill, as `generate` runs the vision tower inside. Same max_new_tokens, same stop
tokens. Each runner is warmed up on 2 samples; then per sample the four run back to back in an
order rotated per sample, so drift in machine speed hits all alike.

Pitfall (transformers 5.23): HF assisted generation with a Llava assistant silently drops the
draft's image. The target pre-encodes the pixels into `mm_encoder_outputs` and pops
`pixel_values`; the assistant's inner `generate` runs with `is_first_iteration=False`, so the
draft never runs its vision tower and sees bare `<image>` token embeddings (no error, a weaker
draft: with the target as its own draft, 1.1 instead of 6 tokens per target forward). Workaround:
a forward pre-hook on the draft's LlavaModel passes it the sample's pixel_values while its cache is
empty (the prompt prefill). `check_assistant_view` asserts that the draft's prompt embeddings then
equal our draft's view M, so both sides draft from the same input.

All four are greedy on the same target, so outputs must match token for token: exit status 1 if
ours differ from HF greedy. Wall-clock times are noisy on shared machines; quote the ratios.
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import io
import json
import sys
import time

import torch
from PIL import Image
from transformers.utils import logging as hf_logging

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.timing import describe_device, pick_device, sync, versions
from mmspec.decoding.trees import ChainPolicy
from mmspec.decoding.views import FullView, ImageInput, ViewContext
from mmspec.models import loading, visual
from mmspec.stages.generate import stop_tokens
from mmspec.tables import PREPARED, read_table

RUNNERS = ["ours_ar", "hf_generate", "ours_sd", "hf_assisted"]


class Bench:
    def __init__(self, args, device):
        self.device, self.max_new = device, args.max_new_tokens
        self.processor = loading.load_processor(args.target)
        self.tokenizer = loading.tokenizer_of(self.processor)
        self.image_token = loading.image_token_of(self.processor)
        self.target = loading.load_model(args.target, device)
        self.draft = loading.load_model(args.draft, device)
        self.stop = stop_tokens(self.target, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.hf_kwargs = dict(do_sample=False, max_new_tokens=self.max_new, pad_token_id=pad)
        self.hf_kwargs["eos_token_id"] = sorted(self.stop)
        config, gamma = self.draft.generation_config, args.gamma
        config.num_assistant_tokens = gamma
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        self.t_dec, self.view, self.policy = Decoder(self.target), FullView(), ChainPolicy(gamma)
        self.drafter = ModelDrafter(Decoder(self.draft), temperature=0.0)
        self.hf_target_forwards = 0

    def sample(self, row: dict) -> dict:
        chat = self.processor.apply_chat_template
        text = chat(json.loads(row["messages"]), add_generation_prompt=True, tokenize=False)
        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in row["images"]]
        inputs = self.processor(images=images or None, text=text, return_tensors="pt")
        return {"text": text, "inputs": inputs.to(self.device)}

    def prompt(self, model, decoder: Decoder, s: dict) -> torch.Tensor:
        """Pixels -> this model's image embeddings -> view M prompt embeddings."""
        pixels = s["inputs"].get("pixel_values")
        images = list(visual.encode_images(model, pixels)[1]) if pixels is not None else []
        ctx = ViewContext(self.tokenizer, decoder.embed, self.image_token)
        prompt = self.view.build(s["text"], [ImageInput(e) for e in images], ctx)
        return prompt.embeds

    def ours_ar(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        return decode_ar(self.t_dec, prompt, self.max_new, self.stop, 0.0, None)

    def ours_sd(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        draft_prompt = self.prompt(self.draft, self.drafter.decoder, s)
        rest = (self.policy, accept_greedy, self.max_new, self.stop, 0.0, None)
        return decode_speculative(self.t_dec, prompt, self.drafter, [draft_prompt], *rest)

    def hf_generate(self, s, **extra):
        out = self.target.generate(**s["inputs"], **self.hf_kwargs, **extra)
        return out[0, s["inputs"]["input_ids"].shape[1] :].tolist()

    def hf_assisted(self, s, spy=None):
        pixels = s["inputs"].get("pixel_values")

        def feed_pixels(module, args, kwargs):  # the workaround (module docstring)
            cache = kwargs.get("past_key_values")
            if pixels is not None and (cache is None or cache.get_seq_length() == 0):
                kwargs.update(pixel_values=pixels, mm_encoder_outputs=None)
            return args, kwargs

        def count(module, args, kwargs):
            self.hf_target_forwards += 1

        hooks = [(self.draft.model, feed_pixels), (self.target.model.language_model, count)]
        hooks += [(self.draft.model.language_model, spy)] if spy else []
        handles = [m.register_forward_pre_hook(f, with_kwargs=True) for m, f in hooks]
        try:
            return self.hf_generate(s, assistant_model=self.draft)
        finally:
            for handle in handles:
                handle.remove()

    def check_assistant_view(self, s) -> None:
        """The HF assistant's prompt embeddings must equal our draft's view M (image included)."""
        seen = []
        self.hf_assisted(s, spy=lambda m, a, k: seen.append(k["inputs_embeds"][0].clone()))
        ours = self.prompt(self.draft, self.drafter.decoder, s)
        if seen[0].shape != ours.shape or not torch.allclose(seen[0], ours, atol=1e-5):
            sys.exit("the HF assistant does not draft from the same prompt as ours (docstring)")


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
    p.add_argument("--json", help="also write the numbers to this file")
    args = p.parse_args(argv)
    for path in (args.target, args.draft, args.prepared):
        if path.startswith(("results/", "/", ".")) and not os.path.exists(path):
            sys.exit(f"{path}: not found (train the toy models / prepare the data first)")
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    device = pick_device()
    bench = Bench(args, device)
    samples = [bench.sample(r) for r in read_table(args.prepared, PREPARED).to_pylist()]
    samples = samples[: args.samples]
    if not samples:
        sys.exit(f"{args.prepared}: no samples")

    def timed(name, s):
        sync(device)
        start = time.perf_counter()
        out = getattr(bench, name)(s)
        sync(device)
        return out, time.perf_counter() - start

    secs, toks = dict.fromkeys(RUNNERS, 0.0), dict.fromkeys(RUNNERS, 0)
    mismatch, steps = dict.fromkeys(["ours_ar", "ours_sd", "hf_assisted"], 0), []
    decode = {"ours_ar": [0.0, 0, 0], "ours_sd": [0.0, 0, 0]}  # seconds, new tokens, steps
    with torch.inference_mode():
        bench.check_assistant_view(samples[0])
        for s in samples[: args.warmup]:
            for name in RUNNERS:
                timed(name, s)
        bench.hf_target_forwards = 0
        bench.drafter.forwards, bench.drafter.forward_s = 0, 0.0
        for i, s in enumerate(samples):
            out = {}
            for name in RUNNERS[i % 4 :] + RUNNERS[: i % 4]:
                result, seconds = timed(name, s)
                if name == "ours_sd":
                    steps += result.steps
                if name.startswith("ours"):  # decode only, for Eq. 1 (its T_p: AR steps)
                    decode[name][0] += result.decode_s
                    decode[name][1] += len(result.tokens) - 1
                    decode[name][2] += len(result.steps)
                out[name] = result.tokens if name.startswith("ours") else result
                secs[name] += seconds
                toks[name] += len(out[name])
            for name in mismatch:
                mismatch[name] += out[name] != out["hf_generate"]

    def ratio(a: str, b: str) -> float:
        return secs[a] / secs[b]

    # TABED's Eq. 1 from this run's own timings: c = T_q / T_p with T_p an AR decoding step
    (ar_s, ar_new, ar_steps), (sd_s, sd_new, sd_steps) = decode["ours_ar"], decode["ours_sd"]
    t_p = ar_s / ar_steps
    c = bench.drafter.forward_s / bench.drafter.forwards / t_p
    k = bench.drafter.forwards / sd_steps
    tau = sd_new / sd_steps
    verify = sum(step.verify_s for step in steps) / sd_steps / t_p
    decode_speedup = (ar_s / ar_new) / (sd_s / sd_new)
    eq1 = {
        "c": c,
        "verify_cost": verify,
        "decode_speedup": decode_speedup,
        "speedup_eq1": tau / (k * c + 1),
        "speedup_eq1_verify": tau / (k * c + verify),
    }

    report = {
        "runners": {
            n: {"seconds": secs[n], "tokens": toks[n], "tokens_per_s": toks[n] / secs[n]}
            for n in RUNNERS
        },
        "ratios": {
            "ours_ar / hf_generate": ratio("ours_ar", "hf_generate"),
            "ours_sd / hf_assisted": ratio("ours_sd", "hf_assisted"),
            "ours_sd speedup (ours_ar / ours_sd)": ratio("ours_ar", "ours_sd"),
            "hf_assisted speedup (hf_generate / hf_assisted)": ratio("hf_generate", "hf_assisted"),
            "ours_sd decode speedup / Eq. 1": decode_speedup / eq1["speedup_eq1"],
            "ours_sd decode speedup / Eq. 1 with verify_cost": (
                decode_speedup / eq1["speedup_eq1_verify"]
            ),
        },
        "eq1": eq1,
        "ours_sd_tau": sum(s.accepted + 1 for s in steps) / max(len(steps), 1),
        "tokens_per_target_forward": {  # ours: one prefill per sample + one per verification
            "ours_sd": toks["ours_sd"] / (len(samples) + len(steps)),
            "hf_assisted": toks["hf_assisted"] / max(bench.hf_target_forwards, 1),
        },
        "mismatches_vs_hf_generate": mismatch,
        "samples": len(samples),
        "args": vars(args),
        "device": describe_device(device),
        "versions": json.loads(versions()),
    }
    print(
        f"{len(samples)} samples, gamma {args.gamma}, max_new_tokens {args.max_new_tokens}, "
        f"{report['device']}"
    )
    print(f"{'runner':<12} {'seconds':>9} {'tokens':>7} {'tokens/s':>9}")
    for n, r in report["runners"].items():
        print(f"{n:<12} {r['seconds']:>9.3f} {r['tokens']:>7d} {r['tokens_per_s']:>9.1f}")
    for name, value in report["ratios"].items():
        print(f"{name:<48} {value:6.3f}")
    per_fwd = report["tokens_per_target_forward"]
    print(f"ours_sd tau (mean accepted + 1 per verification): {report['ours_sd_tau']:.2f}")
    print(
        f"tokens per target forward: ours_sd {per_fwd['ours_sd']:.2f}, "
        f"hf_assisted {per_fwd['hf_assisted']:.2f}"
    )
    print(
        f"Eq. 1: c {c:.3f}, verify_cost {verify:.2f} AR steps, decode speedup "
        f"{decode_speedup:.2f}, estimate {eq1['speedup_eq1']:.2f} (verification = 1 AR step), "
        f"{eq1['speedup_eq1_verify']:.2f} (its measured cost)"
    )
    print("samples whose output differs from hf_generate:", mismatch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if mismatch["ours_ar"] or mismatch["ours_sd"] else 0


if __name__ == "__main__":
    sys.exit(main())
