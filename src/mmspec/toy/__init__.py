"""The toy world: a laptop-sized multimodal world whose models the workflow trains in minutes.

- `world`: the scenes, their renderings and the datasets built from them (captions, stories,
  videos, multi-turn, image generation), with each answer's exact ground truth;
- `dataset_source`, `model_source`: the world as mmspec reads it, a dataset source (`source:
  toy`) and a model source (`toy:<name>`), found by the catalogs as any source is;
- `processor`: the word-level tokenizer and pixel processor of the toy models;
- `recipe`: a toy model's recipe (config `toy.models.<name>`), by kind;
- `training`: the toy captioners (LLaVA-architecture target and draft) and their training;
- `imagegen`, `vq`: the caption-conditioned code-grid image generator and its VQ codebook;
  `generator`: such a trained generator as an image-generation cell reads it;
- `image_nets`: the networks the image metrics read on toy images (FID features, a small CLIP);
  `features`: such a trained feature network as the score stage reads it;
- `quality`, `metric`, `judge_rubric`: the exact rubric of the toy world's answers, as a task
  metric and as the embedded judge's grader;
- `tiny`, `stand_in`: tiny random models of each real family and stand-ins of a config's Hugging
  Face datasets, both over the toy world's words and images, for rehearsing a cluster sweep.
"""
