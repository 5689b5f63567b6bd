"""The plugin API: everything a researcher's own package may import from mmspec, in one module.

A plugin (its own components, trained head kinds, method rows, task metrics, dataset and model
sources, joined through the entry point groups `mmspec.components`, `mmspec.methods`,
`mmspec.metrics`, `mmspec.dataset_sources` and `mmspec.model_sources`) imports from here only:
`from mmspec.api import Drafter, Param`. What this module exports, the hooks its classes declare
and the members of the engine's objects listed here are the API; anything else of mmspec may
change without notice.

The API has a version, `API_VERSION`, an integer raised whenever a plugin written for the one
before would need a change (CHANGELOG.md: the versions and, per version, its migration). A
plugin declares the version it was written for, `mmspec_api = 2`, as a module attribute (of its
package or of the module its entry point names) or a class attribute; one declaring another
version is refused when mmspec loads it, before any job, and so is a class still defining a hook
an earlier version read (a drafter's `build` classmethod, `exit_below`), naming its replacement.

Importing this module imports no torch (mmspec's torch-using modules import it on first use),
so a plugin that imports torch only where it computes keeps `mmspec cells` and every Snakemake
parse as light as they are without it.
"""

from __future__ import annotations

from mmspec.data.media import ANSWER, IMAGE_GENERATION, image_id, to_png
from mmspec.data.source import DatasetSource
from mmspec.decoding.acceptance.rule import Rule as AcceptanceRule
from mmspec.decoding.component import (
    CAPTIONS,
    CODEBOOK,
    DRAFT_MODEL,
    DRAFT_VISUAL,
    HIDDEN_STATES,
    NUMBER,
    TARGET_ATTENTION,
    TRAINED_HEAD,
    Component,
    Param,
    TargetFacts,
    Values,
    View,
)
from mmspec.decoding.decoder import Decoder, Forward
from mmspec.decoding.drafters import Drafter, HeadPrompts, tree_feed
from mmspec.decoding.drafters.head_loss import HeadLoss
from mmspec.decoding.drafters.model import DecoderDrafter, ModelDrafter
from mmspec.decoding.drafters.trained import HEAD_NOISE, HEAD_TRAINING, HeadDrafter
from mmspec.decoding.probability import distribution
from mmspec.decoding.prompt import Prompt
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.sampler import Sampler
from mmspec.decoding.token_context import TokenContext
from mmspec.decoding.trees import GAMMA, TreePolicy
from mmspec.decoding.views import (
    ImageInput,
    ViewContext,
    embed_with_images,
    full_prompt,
    keep_visual,
)
from mmspec.decoding.weights import History
from mmspec.decoding.weights import Policy as WeightPolicy
from mmspec.methods.rows.row import Method
from mmspec.methods.spec import Part
from mmspec.models.source import FID_FEATURES, IMAGE_GENERATOR, ModelSource
from mmspec.plugins.entry_points import API_VERSION
from mmspec.schema import ConfigError
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric
from mmspec.storage.tables import PREPARED, write_table

# The exported names, by section of docs/reference/api.md (a comment starts one)
__all__ = [
    # Versions
    "API_VERSION",
    # Declaring a component
    "Component",
    "Param",
    "NUMBER",
    "Values",
    "GAMMA",
    "TargetFacts",
    "DRAFT_MODEL",
    "TRAINED_HEAD",
    "DRAFT_VISUAL",
    "CAPTIONS",
    "TARGET_ATTENTION",
    "CODEBOOK",
    "HIDDEN_STATES",
    # Drafters
    "Drafter",
    "DecoderDrafter",
    "ModelDrafter",
    "Part",
    "HeadPrompts",
    "tree_feed",
    # What the engine hands a drafter
    "Decoder",
    "Forward",
    "Prompt",
    "TokenContext",
    "Proposal",
    "ROOT",
    "Sampler",
    "distribution",
    # Trained heads
    "HeadDrafter",
    "HeadLoss",
    "HEAD_TRAINING",
    "HEAD_NOISE",
    # Views
    "View",
    "ImageInput",
    "ViewContext",
    "full_prompt",
    "keep_visual",
    "embed_with_images",
    # Weight policies
    "WeightPolicy",
    "History",
    # Tree policies
    "TreePolicy",
    # Acceptance rules
    "AcceptanceRule",
    # Method rows
    "Method",
    # Task metrics
    "TaskMetric",
    "Sample",
    "TEXT",
    "ANSWERS",
    # Dataset and model sources
    "DatasetSource",
    "ANSWER",
    "IMAGE_GENERATION",
    "PREPARED",
    "write_table",
    "to_png",
    "image_id",
    "ModelSource",
    "IMAGE_GENERATOR",
    "FID_FEATURES",
    "ConfigError",
]

# The members of the engine's objects a plugin may read or call; their other attributes are the
# engine's own and may change within a version. A class not named here: every public member.
SURFACE = {
    "Decoder": (
        "__init__",
        "model",
        "stack",
        "lm_head",
        "embed",
        "device",
        "rows",
        "length",
        "prefill",
        "extend",
        "extend_vectors",
        "head_logits",
        "keep",
        "truncate",
    ),
    "DecoderDrafter": ("__init__", "decoder", "views", "start", "root", "expand", "commit"),
    "ModelDrafter": ("reads", "from_spec"),
}
