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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

NUMBER = (int, float)  # a `Param`'s type for a number, an int or a float

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

    ref: str  # its model reference, as the config spells it
    layers: int | None = None  # decoder layers of its language model
    codes: int | None = None  # image codes of its VQ codebook (an image generator)


@dataclass(frozen=True)
class Param:
    """One hyperparameter a component reads: its key in a method spec, its type, default and
    allowed values. `meaning` (a phrase: "is a probability") words the range error."""

    key: str  # its key in a method spec (and in a sweep's `methods:` entry)
    type: type | tuple[type, ...]  # the type a value must have (`NUMBER`: int or float)
    default: Any  # the value where neither the method row nor the config sets one
    doc: str = ""  # what it is, a phrase (the method catalogue's "meaning")
    choices: tuple | None = None  # the values allowed, when they are few
    low: float | None = None  # the least value allowed (None: unbounded)
    high: float | None = None  # the greatest value allowed (None: unbounded)
    low_open: bool = False  # the bound itself is not allowed
    high_open: bool = False  # the bound itself is not allowed
    meaning: str = ""
    hint: str = ""  # after the range in the error: "0 = greedy"
    optional: bool = False  # None is a value (unset)
    arg: str = ""  # the keyword the component's constructor takes (default: the key)

    @property
    def argument(self) -> str:
        """The keyword the component's constructor takes it as (`arg`, else the key)."""
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
            return f"{self.key}={value!r} should be {self.type_words()}"
        if (self.low is None or self._above_low(value)) and (
            self.high is None or self._below_high(value)
        ):
            return None
        meaning = f" {self.meaning} and" if self.meaning else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.key}{meaning} must be {self.range_text()}{hint}, got {value}"

    def type_words(self) -> str:
        """Its type in words ("a number", "an integer", "true or false", ...)."""
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if set(types) == {int, float}:
            return "a number"
        words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        return " or ".join(words.get(t, f"a {t.__name__}") for t in types)

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


class Values(Mapping):
    """A method's values as its components' hooks and constructors receive them, read-only:
    the choices as typed fields (`method`, `drafter`, `views`, `weights`, `tree`, `acceptance`,
    `temperature`; None where the method has none, or where resolution has not set it yet) and
    each hyperparameter by the `Param` that declares it (`of`; another component's too, by its
    `Param`: the chain's `GAMMA` is exported). It is also a read-only mapping by key
    (`[key]`, `.get(key)`), as hooks read their spec before it came (the same API version)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping | None = None):
        # not copied: a view of the resolved values, which nothing changes once resolved
        self._values = {} if values is None else values

    def of(self, param: Param) -> Any:
        """The value of `param` (its default where the method does not set it)."""
        return self._values.get(param.key, param.default)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Values({dict(self._values)!r})"

    @property
    def method(self) -> str | None:
        """The registry method it resolved from."""
        return self._values.get("method")

    @property
    def drafter(self) -> str | None:
        """Its drafter's name (`none` for autoregressive decoding)."""
        return self._values.get("drafter")

    @property
    def views(self) -> str | None:
        """The views its drafter drafts from, one letter each (a drafter reading them)."""
        return self._values.get("views")

    @property
    def weights(self) -> str | None:
        """The weight policy of an ensemble of two or more views."""
        return self._values.get("weights")

    @property
    def tree(self) -> str | None:
        """Its tree policy's name (a drafting method)."""
        return self._values.get("tree")

    @property
    def acceptance(self) -> str | None:
        """Its acceptance rule's name (a drafting method)."""
        return self._values.get("acceptance")

    @property
    def temperature(self) -> float:
        """The sampling temperature (0: greedy)."""
        return float(self._values.get("temperature", 0.0))


def values(spec: Mapping) -> Values:
    """`spec` as hooks receive it (a `Values` passes through)."""
    return spec if isinstance(spec, Values) else Values(spec)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class Component:
    """A part of a method. Subclasses set the class attributes; the kinds below add what their
    part does."""

    kind: ClassVar[str] = ""  # "view", "weights", "tree", "acceptance" or "drafter"
    name: ClassVar[str] = ""  # its name in a method spec
    params: ClassVar[tuple[Param, ...]] = ()  # the hyperparameters it reads (`Param`s)
    # what it needs of the pair and the data (`DRAFT_MODEL`, `TRAINED_HEAD`, ...)
    requires: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""  # a phrase for the method catalogue and the report
    source: ClassVar[str] = ""  # the paper section or release file its defaults come from

    @classmethod
    def defaults(cls) -> dict:
        """key -> default of each of its params."""
        return {p.key: p.default for p in cls.params}

    @classmethod
    def reads(cls, spec: Values) -> tuple[Param, ...]:
        """The parameters this component reads in `spec` (some read more in some settings).
        `spec` holds the method's values as resolution has them so far, so one may be unset
        yet: `spec.of(param)` gives its default then, and a choice (`spec.tree`) None."""
        return cls.params

    @classmethod
    def requirements(cls, spec: Values) -> frozenset[str]:
        """What it requires in `spec`'s setting (some require more in some settings); `spec`
        as `check` gets it."""
        return cls.requires

    @classmethod
    def check(cls, spec: Values) -> None:
        """Raise ValueError (one line, naming the keys) on a combination of values that cannot
        run, before any job. `spec` holds the method's whole resolved values (`Values`), not
        this component's own alone: every hyperparameter the method's components read
        (`spec.of(param)`: defaults filled in, each value already checked against its `Param`)
        and the choices `spec.method`, `spec.drafter` and `spec.temperature`, plus `spec.tree`
        and `spec.acceptance` when it drafts (`spec.views` and `spec.weights` where its drafter
        reads them). A rule that verifies chains only reads `spec.tree`."""

    @classmethod
    def check_target(cls, spec: Values, target: TargetFacts) -> None:
        """Raise ValueError when the pair's target cannot serve `spec` (the whole spec, as
        `check` gets it; config validation, before any job: what `target` knows of it)."""

    @classmethod
    def code_modules(cls) -> tuple[str, ...]:
        """Modules its code imports by name at run time (beyond its module's import
        statements): part of its cells' code fingerprint (`MethodSpec.plugin_code`)."""
        return ()

    @classmethod
    def from_spec(cls, spec: Values) -> Component:
        """The component built from its own values, those of the params it reads in its method
        (those `reads` names: `spec.of(param)`; a `methods.spec.Part`'s), nothing else.
        Some kinds take more beside them, as keywords: a weight policy the draft's
        `vocab_size`, a rule the target's `codebook`, a drafter its models (`target`, `draft`,
        `head`), its drafting `temperature` and, over two or more views, their weight
        policy's part (`weights`). By default: the constructor with the declared params (by
        `Param.argument`)."""
        return cls(**cls.arguments(spec))

    @classmethod
    def arguments(cls, spec: Mapping) -> dict:
        """The constructor's keyword arguments from its own values (by `Param.argument`; a
        plain mapping by key too, as an API 2 plugin may pass)."""
        spec = values(spec)
        return {p.argument: spec.of(p) for p in cls.params if p.key in spec}


class View(Component):
    """What a drafter sees of the prompt (decoding.views); named by one letter."""

    kind = "view"

    def build(self, text: str, images: list, ctx) -> object:
        """The drafter's prompt in this view, a `Prompt`: `text` the sample's prompt text (each
        image an image token), `images` its `ImageInput`s (the draft model's visual cache, a
        caption), `ctx` the draft's `ViewContext` (tokenizer, input embedding, projector, the
        family's prompt builder)."""
        raise NotImplementedError


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
    # accepts draft tokens the target would not have written, in a text answer (a lossy rule
    # such as FLy's or LANTERN's): its cells get the report's loose-verification section, which
    # sets their speed against the answers' retention, and the share of such tokens accepted
    loose: ClassVar[bool] = False

    @classmethod
    def lossless_with(cls, params: Values) -> bool:
        """Whether the rule with these values (the method's) preserves the target's distribution (a
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
