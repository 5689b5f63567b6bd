"""The jobs of the cell stages, typed: what the workflow writes once (JSON on the command line,
`to_json`) and the stage reads once (`parse`) into objects with named fields.

- `GenerateJob`: one cell to decode (stage generate);
- `TrainDrafterJob`: one drafter head to train for a pair (stage train_drafter);
- the config sections the other stages read, as settings with named fields: `Captioner`
  (stage caption), `JudgeSettings` (stage judge), `ImageModels` (stage score, image metrics).
  Their JSON is the section as validated, so a workflow's params do not change with them.

The stages' remaining arguments are paths and scalars (typed by the command line); a dataset's
entry (stage prepare) and a toy model's recipe (stage toy_model) stay the schema-validated
dicts, whose keys differ by source and kind.

Their JSON keeps the layout the stages have always read ({"cell": {...}, "pair": {...}, ...}),
so the checkpoint key of an interrupted job (stages.checkpoints.job_key) does not change. Keys a
hand-written job leaves out take the defaults config/schema.yaml declares.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields

from mmspec import schema


class _Settings:
    """Settings read from one section of the config: `parse` takes a dict of it and fills what
    it omits from the schema's defaults of that section; an unknown key, or a key with neither
    a value nor a default, is a named error."""

    KEY = ""  # the section's name in a job's errors

    @classmethod
    def _schema(cls) -> dict:
        return schema.section(cls.KEY)

    @classmethod
    def parse(cls, data: dict | str):
        """The settings from the section's dict (or its JSON); an instance passes through."""
        if isinstance(data, cls):
            return data
        data = json.loads(data) if isinstance(data, str) else data
        if not isinstance(data, dict):
            raise ValueError(f"job key {cls.KEY}: expected a mapping, got {data!r}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"job key {cls.KEY}: unknown {unknown}")
        values = {**schema.defaults(cls._schema()), **data}
        missing = [f.name for f in fields(cls) if f.name not in values and f.default is MISSING]
        if missing:
            raise ValueError(f"job key {cls.KEY}: missing {missing}")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Generation(_Settings):
    """The sweep's generation settings (config key `generation`)."""

    KEY = "generation"
    max_new_tokens: int
    temperature: float
    cfg: float
    top_k: int


@dataclass(frozen=True)
class Timing(_Settings):
    """How a generate job times its cell (config key `timing`)."""

    KEY = "timing"
    warmup_samples: int
    threads: int


@dataclass(frozen=True)
class Pair(_Settings):
    """A model pair as validated (config key `pairs.<name>`; "self" already resolved)."""

    KEY = "pair"
    target: str
    dtype: str
    draft: str | None = None
    target_device_map: str | dict | None = None

    @classmethod
    def _schema(cls) -> dict:
        return schema.section("pairs")["additionalProperties"]

    @property
    def self_draft(self) -> bool:
        """Whether the target drafts for itself (Self-SD)."""
        return self.draft == self.target

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Captioner(_Settings):
    """The captioning model of view C (config key `captioner`)."""

    KEY = "captioner"
    model: str
    prompt: str
    max_new_tokens: int
    dtype: str


@dataclass(frozen=True)
class JudgeSettings(_Settings):
    """The LLM judge's endpoint and its client's limits (config key `judge`)."""

    KEY = "judge"
    endpoint: str
    model: str
    api_key_env: str | None
    concurrency: int
    requests_per_s: float | None
    timeout_s: float
    max_retries: int
    backoff_s: float
    max_backoff_s: float


@dataclass(frozen=True)
class ImageModels(_Settings):
    """FID's feature network and the CLIP model of CLIP score (config key `image_metrics`)."""

    KEY = "image_metrics"
    fid_features: str
    clip: str


@dataclass(frozen=True)
class GenerateJob:
    """One cell to decode: which (dataset, pair, method entry, hp, seed), the method's resolved
    spec, the pair's models, the dataset's task and the sweep's generation and timing."""

    dataset: str
    pair_name: str
    method: str  # the config entry's name
    hp: str
    seed: int
    spec: dict  # the resolved method spec (methods.registry.resolve)
    pair: Pair
    task: str  # "answer" or media.IMAGE_GENERATION
    generation: Generation
    timing: Timing

    @classmethod
    def of_cell(cls, config: dict, cell, task: str) -> GenerateJob:
        """The job of a validated config's cell (the workflow's side); `task`: its dataset's
        (config.dataset_task)."""
        return cls(
            dataset=cell.dataset,
            pair_name=cell.pair,
            method=cell.method,
            hp=cell.hp,
            seed=cell.seed,
            spec=cell.spec,
            pair=Pair.parse(config["pairs"][cell.pair]),
            task=task,
            generation=Generation.parse(config["generation"]),
            timing=Timing.parse(config["timing"]),
        )

    @classmethod
    def target_only(cls, pair: Pair, task: str, generation: Generation, spec: dict) -> GenerateJob:
        """A job that decodes with the pair's target alone (a drafter head's training data)."""
        timing = Timing.parse({})
        return cls("", "", spec["method"], "", 0, spec, pair, task, generation, timing)

    @classmethod
    def parse(cls, data: dict | str | GenerateJob) -> GenerateJob:
        """The job from its JSON (or the dict of it); defaults for what a hand-written one omits."""
        if isinstance(data, GenerateJob):
            return data
        data = json.loads(data) if isinstance(data, str) else data
        cell = data["cell"]
        return cls(
            dataset=cell.get("dataset", ""),
            pair_name=cell.get("pair", ""),
            method=cell.get("method", cell["spec"]["method"]),
            hp=cell.get("hp", ""),
            seed=int(cell.get("seed", 0)),
            spec=cell["spec"],
            pair=Pair.parse(data["pair"]),
            task=data.get("task", "answer"),
            generation=Generation.parse(data.get("generation", {})),
            timing=Timing.parse(data.get("timing", {})),
        )

    def to_dict(self) -> dict:
        cell = {"dataset": self.dataset, "pair": self.pair_name, "method": self.method}
        cell |= {"hp": self.hp, "seed": self.seed, "spec": self.spec}
        return {
            "cell": cell,
            "pair": self.pair.to_dict(),
            "task": self.task,
            "generation": asdict(self.generation),
            "timing": asdict(self.timing),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


@dataclass(frozen=True)
class TrainDrafterJob:
    """One drafter head to train: the pair, the head's kind and training hyperparameters, the
    task of its training data, the sweep's generation settings and the toy world's seed."""

    pair: Pair
    kind: str
    training: dict  # methods.components.head_training of a cell that drafts with the head
    task: str
    generation: Generation
    seed: int

    @classmethod
    def of_cell(cls, config: dict, cell, task: str) -> TrainDrafterJob:
        """The job that trains the head of a validated config's cell (the workflow's side);
        `task`: the task of the head's training data (config.dataset_task)."""
        from mmspec.methods.components import head_training

        return cls(
            pair=Pair.parse(config["pairs"][cell.pair]),
            kind=cell.spec["drafter"],
            training=head_training(cell.spec),
            task=task,
            generation=Generation.parse(config["generation"]),
            seed=config["toy"]["seed"],
        )

    @classmethod
    def parse(cls, data: dict | str | TrainDrafterJob) -> TrainDrafterJob:
        """The job from its JSON (or the dict of it)."""
        if isinstance(data, TrainDrafterJob):
            return data
        data = json.loads(data) if isinstance(data, str) else data
        return cls(
            pair=Pair.parse(data["pair"]),
            kind=data["kind"],
            training=data["training"],
            task=data.get("task", "answer"),
            generation=Generation.parse(data.get("generation", {})),
            seed=int(data.get("seed", 0)),
        )

    def to_dict(self) -> dict:
        return {
            "pair": self.pair.to_dict(),
            "kind": self.kind,
            "training": self.training,
            "task": self.task,
            "generation": asdict(self.generation),
            "seed": self.seed,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)
