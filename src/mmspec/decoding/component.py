"""What a component of a method declares about itself.

A method composes a drafter, the views it drafts from (and, for an ensemble of views, a weight
policy), a tree policy and an acceptance rule. Each of those is one class that declares its
`name`, the hyperparameters it reads (`params`: key, type, allowed values, default), what it
`requires` of the pair and the data, and how it is built from its own spec, the values of the
params it reads (`from_spec`). The catalog (`decoding.catalog`) fills itself from these
declarations, and validation, grids, fingerprints, the report and `mmspec verify-lossless`
read them, so a new component is one class (one file), and a researcher's own package adds some
through the entry point group `mmspec.components`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

NUMBER = (int, float)

# What a component may require (`Component.requires`):
DRAFT_MODEL = "draft_model"  # a draft model in the pair (its own weights and tokenizer)
TRAINED_HEAD = "trained_head"  # a head trained on the target's features (stage train_drafter)
DRAFT_VISUAL = "draft_visual"  # the draft model's visual cache (views over visual tokens)
CAPTIONS = "captions"  # a caption per image (the config's captioner)
TARGET_ATTENTION = "target_attention"  # the target's text-to-visual attention at prefill
CODEBOOK = "codebook"  # the target's VQ codebook (image generation)
HIDDEN_STATES = "hidden_states"  # the target's hidden states of drafted and visual tokens
REQUIREMENTS = (
    DRAFT_MODEL,
    TRAINED_HEAD,
    DRAFT_VISUAL,
    CAPTIONS,
    TARGET_ATTENTION,
    CODEBOOK,
    HIDDEN_STATES,
)


@dataclass(frozen=True)
class TargetFacts:
    """What is known of a pair's target before any job (None: unknown until its files are at
    hand, e.g. a hub model not downloaded yet); `Component.check_target` reads it."""

    ref: str
    layers: int | None = None  # decoder layers of its language model
    codes: int | None = None  # image codes of its VQ codebook (an image generator)


@dataclass(frozen=True)
class Param:
    """One hyperparameter a component reads: its key in a method spec, its type, default and
    allowed values. `meaning` (a phrase: "is a probability") words the range error."""

    key: str
    type: type | tuple[type, ...]
    default: Any
    doc: str = ""
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the bound itself is not allowed
    high_open: bool = False
    meaning: str = ""
    hint: str = ""  # after the range in the error: "0 = greedy"
    optional: bool = False  # None is a value (unset)
    arg: str = ""  # the keyword the component's constructor takes (default: the key)

    @property
    def argument(self) -> str:
        return self.arg or self.key

    def problem(self, value) -> str | None:
        """Why `value` is not a value of this parameter, naming the key; None when it is."""
        if value is None:
            return None if self.optional else f"{self.key} needs a value"
        if self.choices is not None:
            if value not in self.choices:
                return f"{self.key}={value!r} is not one of {list(self.choices)}"
            return None
        if isinstance(value, bool) != (self.type is bool) or not isinstance(value, self.type):
            return f"{self.key}={value!r} should be of type {self.type}"
        if (self.low is None or self._above_low(value)) and (
            self.high is None or self._below_high(value)
        ):
            return None
        meaning = f" {self.meaning} and" if self.meaning else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.key}{meaning} must be {self.range_text()}{hint}, got {value}"

    def _above_low(self, value) -> bool:
        return value > self.low if self.low_open else value >= self.low

    def _below_high(self, value) -> bool:
        return value < self.high if self.high_open else value <= self.high

    def range_text(self) -> str:
        """The allowed range in words ("in [0, 1]", ">= 1"); "" when unbounded."""
        if self.low is None and self.high is None:
            return ""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {left}{_number(self.low)}, {_number(self.high)}{right}"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class Component:
    """A part of a method. Subclasses set the class attributes; the kinds below add what their
    part does."""

    kind: ClassVar[str] = ""  # "view", "weights", "tree", "acceptance" or "drafter"
    name: ClassVar[str] = ""  # its name in a method spec
    params: ClassVar[tuple[Param, ...]] = ()
    requires: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""
    source: ClassVar[str] = ""  # the paper section or release file its defaults come from

    @classmethod
    def defaults(cls) -> dict:
        return {p.key: p.default for p in cls.params}

    @classmethod
    def reads(cls, spec: dict) -> tuple[Param, ...]:
        """The parameters this component reads in `spec` (some read more in some settings)."""
        return cls.params

    @classmethod
    def requirements(cls, spec: dict) -> frozenset[str]:
        """What it requires in `spec`'s setting (some require more in some settings)."""
        return cls.requires

    @classmethod
    def check(cls, spec: dict) -> None:
        """Raise ValueError on a combination of values that cannot run (each value is already
        checked against its `Param`)."""

    @classmethod
    def check_target(cls, spec: dict, target: TargetFacts) -> None:
        """Raise ValueError when the pair's target cannot serve `spec` (config validation,
        before any job: what `target` knows of it)."""

    @classmethod
    def code_modules(cls) -> tuple[str, ...]:
        """Modules its code imports by name at run time (beyond its module's import
        statements): part of its cells' code fingerprint (`components.plugin_code`)."""
        return ()

    @classmethod
    def from_spec(cls, spec: dict) -> Component:
        """The component built from its own spec: the values of the params it reads in its
        method (a `methods.spec.Part`'s). Some kinds take more beside them: a weight policy
        the draft's `vocab_size`, a rule the target's `codebook`, a drafter its models, its
        drafting temperature and, over an ensemble of views, their weight policy's part. By
        default: the constructor with the declared params."""
        return cls(**cls.arguments(spec))

    @classmethod
    def arguments(cls, spec: dict) -> dict:
        """The constructor's keyword arguments from its own spec (by `Param.argument`)."""
        return {p.argument: spec[p.key] for p in cls.params if p.key in spec}


class View(Component):
    """What a drafter sees of the prompt (decoding.views); named by one letter."""

    kind = "view"


class WeightPolicy(Component):
    """How an ensemble of views mixes its views' distributions (decoding.weights)."""

    kind = "weights"


class TreePolicy(Component):
    """The shape of each proposal (decoding.trees)."""

    kind = "tree"
    # draws its nodes from q at the sampling temperature (a chain); a policy that picks them
    # (top-k) gets q at temperature 1 to rank them (trees.drafting_temperature)
    draws: ClassVar[bool] = False


class AcceptanceRule(Component):
    """How the target's verification judges a proposal (decoding.acceptance)."""

    kind = "acceptance"
    lossless: ClassVar[bool] = False  # preserves the target's output distribution
    loose: ClassVar[bool] = False  # accepts mismatched draft tokens of a text answer

    @classmethod
    def lossless_with(cls, params: dict) -> bool:
        """Whether the rule with these hyperparameters preserves the target's distribution (a
        lossy rule with no room to relax is the lossless rule, draw for draw)."""
        return cls.lossless


class Drafter(Component):
    """What proposes the draft tokens (decoding.drafters): a draft model over views, or a head
    trained on the target's features."""

    kind = "drafter"
    drafts_images: ClassVar[bool] = False  # also drafts image codes under guidance
    # the params that define a trained head (its folder): training, not drafting
    training: ClassVar[tuple[str, ...]] = ()


KINDS = {k.kind: k for k in (View, WeightPolicy, TreePolicy, AcceptanceRule, Drafter)}
