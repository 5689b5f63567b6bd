"""The toy world: a laptop-sized multimodal world whose models the workflow trains in minutes.

- `world`: the scenes, their renderings and the datasets built from them (captions, stories,
  videos, multi-turn, image generation), with each answer's exact ground truth;
- `processor`: the word-level tokenizer and pixel processor of the toy models;
- `training`: the toy captioners (LLaVA-architecture target and draft) and their training;
- `imagegen`: the caption-conditioned code-grid image generator (with its VQ codebook);
- `image_nets`: the networks the image metrics read on toy images (FID features, a small CLIP);
- `quality`: the exact rubric of the toy world's answers (the task metric and the embedded
  judge's grader).



"""
