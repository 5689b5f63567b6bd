"""The jobs of the cell stages, typed: what the workflow writes once (JSON on the command line,
`to_json`) and the stage reads once (`parse`) into objects with named fields.

- `GenerateJob`: one cell to decode (stage generate);
- `TrainDrafterJob`: one drafter head to train for a pair (stage train_drafter).

The config sections they carry (generation, timing, the pair) are typed in stages/settings.py.

Their JSON keeps the layout the stages have always read ({"cell": {...}, "pair": {...}, ...}),
so the checkpoint key of an interrupted job (stages.checkpoints.job_key) does not change. Keys a
hand-written job leaves out take the defaults config/schema.yaml declares.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from mmspec.methods.registry import resolve
from mmspec.methods.spec import MethodSpec
from mmspec.sweep.settings import Generation, Pair, Timing


@dataclass(frozen=True)
class GenerateJob:
    """One cell to decode: which (dataset, pair, method entry, hp, seed), the method's resolved
    spec, the pair's models, the dataset's task and the sweep's generation and timing."""

    dataset: str
    pair_name: str
    method: str  # the config entry's name
    hp: str
    seed: int
    spec: MethodSpec  # the resolved method spec (methods.registry.resolve)
    pair: Pair
    task: str  # "answer" or media.IMAGE_GENERATION
    generation: Generation
    timing: Timing

    @classmethod
    def of_cell(cls, config: dict, cell, task: str) -> GenerateJob:
        """The job of a validated config's cell (the workflow's side); `task`: its dataset's
        (config_checks.dataset_task)."""
        timing = Timing.parse(config["timing"])
        return cls(
            dataset=cell.dataset,
            pair_name=cell.pair,
            method=cell.method,
            hp=cell.hp,
            seed=cell.seed,
            spec=cell.spec,
            pair=Pair.parse(config["pairs"][cell.pair]),
            task=task,
            generation=Generation.of_config(config["generation"]),
            timing=timing.of_ar_cell() if cell.spec.is_ar else timing,
        )

    @classmethod
    def target_only(cls, pair: Pair, task: str, generation: Generation) -> GenerateJob:
        """A job that decodes with the pair's target alone, greedily (AR: a drafter head's
        training data)."""
        spec = resolve("ar", {})
        return cls("", "", spec.method, "", 0, spec, pair, task, generation, Timing.parse({}))

    @classmethod
    def parse(cls, data: dict | str | GenerateJob) -> GenerateJob:
        """The job from its JSON (or the dict of it); defaults for what a hand-written one omits."""
        if isinstance(data, GenerateJob):
            return data
        data = json.loads(data) if isinstance(data, str) else data
        cell = data["cell"]
        spec = MethodSpec.parse(cell["spec"])
        return cls(
            dataset=cell.get("dataset", ""),
            pair_name=cell.get("pair", ""),
            method=cell.get("method", spec.method),
            hp=cell.get("hp", ""),
            seed=int(cell.get("seed", 0)),
            spec=spec,
            pair=Pair.parse(data["pair"]),
            task=data.get("task", "answer"),
            generation=Generation.parse(data.get("generation", {})),
            timing=Timing.parse(data.get("timing", {})),
        )

    def to_dict(self) -> dict:
        cell = {"dataset": self.dataset, "pair": self.pair_name, "method": self.method}
        cell |= {"hp": self.hp, "seed": self.seed, "spec": self.spec.to_dict()}
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
    training: dict  # MethodSpec.head_training of a cell that drafts with the head
    task: str
    generation: Generation
    seed: int

    @classmethod
    def of_cell(cls, config: dict, cell, task: str) -> TrainDrafterJob:
        """The job that trains the head of a validated config's cell (the workflow's side);
        `task`: the task of the head's training data (config_checks.dataset_task)."""
        return cls(
            pair=Pair.parse(config["pairs"][cell.pair]),
            kind=cell.spec.drafter,
            training=cell.spec.head_training(),
            task=task,
            generation=Generation.of_config(config["generation"]),
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
