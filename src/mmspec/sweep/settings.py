"""Config sections as typed settings, parsed once: `Settings.parse` takes a section's dict (or
its JSON), fills what it omits from the schema's defaults of that section, and names an unknown
key or a key with neither a value nor a default.

- `Captioner` (stage caption), `JudgeSettings` (stage judge), `ImageModels` (stage score, image
  metrics); `Generation`, `Timing` and `Pair`, which the cell jobs carry (stages/jobs.py).

Their JSON is the section as validated, so a workflow's params do not change with them. The
stages' other arguments are paths and scalars (typed by the command line); a dataset's entry
(stage prepare) and a toy model's recipe (stage toy_model, toy/recipe.py) stay the
schema-validated dicts, whose keys differ by source and kind.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields, replace

from mmspec import schema


class Settings:
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
class Captioner(Settings):
    """The captioning model of view C (config key `captioner`)."""

    KEY = "captioner"
    model: str
    prompt: str
    max_new_tokens: int
    dtype: str


EMBEDDED_JUDGE = "embedded"  # `judge.endpoint` value that starts mmspec's own judge server


@dataclass(frozen=True)
class JudgeSettings(Settings):
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

    @property
    def embedded(self) -> bool:
        """Whether the endpoint is mmspec's own judge server (`embedded`), which grades with
        the exact rubric a dataset source declares (the toy world's)."""
        return self.endpoint == EMBEDDED_JUDGE


@dataclass(frozen=True)
class ImageModels(Settings):
    """FID's feature network and the CLIP model of CLIP score (config key `image_metrics`)."""

    KEY = "image_metrics"
    fid_features: str
    clip: str


@dataclass(frozen=True)
class Generation(Settings):
    """The sweep's generation settings a cell's job carries (config key `generation`), but
    its `temperature`: each method spec holds its own (the section's is what
    `registry.resolve` defaults it to), so a job carries it once, as `cell.spec.temperature`."""

    KEY = "generation"
    max_new_tokens: int
    cfg: float
    top_k: int

    SPEC_KEYS = ("temperature",)  # the section's keys its method specs hold

    @classmethod
    def of_config(cls, section: dict) -> Generation:
        """The settings of a validated config's `generation` section."""
        return cls.parse({k: v for k, v in section.items() if k not in cls.SPEC_KEYS})

    @classmethod
    def parse(cls, data: dict | str):
        if isinstance(data, dict) and any(key in data for key in cls.SPEC_KEYS):
            raise ValueError(
                "job key generation.temperature: a job's temperature is its method spec's "
                "(cell.spec.temperature), not the generation settings'"
            )
        return super().parse(data)


@dataclass(frozen=True)
class Timing(Settings):
    """How a generate job times its cell (config key `timing`)."""

    KEY = "timing"
    warmup_samples: int
    threads: int
    ar_reference: str  # "probe": AR's first ar_probe_tokens steps per sample; "full": all
    ar_probe_tokens: int

    PROBE = ("ar_reference", "ar_probe_tokens")  # how a method cell times AR beside itself

    def of_ar_cell(self) -> Timing:
        """These settings as an AR cell's job holds them: the probe's at their defaults, since
        the AR cell's timing is its own decode (changing the probe reruns method cells only)."""
        defaults = schema.defaults(self._schema())
        return replace(self, **{key: defaults[key] for key in self.PROBE})


@dataclass(frozen=True)
class Pair(Settings):
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
