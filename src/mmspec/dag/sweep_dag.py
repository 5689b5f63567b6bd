"""The sweep as the workflow's rules read it, built once per parse from the validated config:
the cells and their batches, the searches' rounds proposed so far, every output of the sweep,
and what each rule's inputs, params and resources are for a job's wildcards. The Snakefile
(workflow/rules/*.smk) holds only the DAG and calls these; what needs Snakemake's own objects
(checkpoints, the executor) stays there.
"""

from __future__ import annotations

import json

from mmspec.claims.claim import CLAIMS_DIR
from mmspec.data import source as dataset_source
from mmspec.models import footprint
from mmspec.models import source as model_source
from mmspec.planning import hub_needs
from mmspec.scoring.judge import reach as judge_reach
from mmspec.search import rounds as search_rounds
from mmspec.storage import integrity
from mmspec.sweep import cell_inputs, config_checks, search_runs
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep.jobs import TrainDrafterJob
from mmspec.sweep.settings import Captioner
from mmspec.workflow import batches
from mmspec.workflow.fingerprint import fingerprint

# The stages whose jobs load a model of the sweep (their code fingerprints, read once per parse)
MODEL_STAGES = ("cache_visual", "caption")


class SweepDag:
    """The validated `config`'s sweep as its rules read it (one per parse)."""

    def __init__(self, config: dict):
        self.config = config
        self.cells = {
            (c.dataset, c.pair, c.method, c.hp, str(c.seed)): c for c in mmcells.cells(config)
        }
        # model slug -> (reference, dtype) for every model a pair names
        self.models = {
            mmcells.model_slug(pair[role]): (pair[role], pair["dtype"])
            for pair in config["pairs"].values()
            for role in ("target", "draft")
            if role in pair
        }
        self.captioner = config.get("captioner")
        self.toy_models = config["toy"]["models"]
        # the claims files (rule claims reads them all)
        self.claims_files = sorted(str(p) for p in CLAIMS_DIR.glob("*.yaml"))
        # a trained head's folder -> one cell drafting with it (they share its training values)
        self.head_cells = {
            mmcells.drafter_dir(c): c for c in self.cells.values() if mmcells.drafter_dir(c)
        }
        # The per-cell stages run in batches of cells (workflow.batches); each batch's record
        # is a target.
        batch_of = batches.partition(self.cells.values(), config["batch_cells"])
        self.batches = batches.of_sweep(config, self.cells.values(), batch_of)
        self.grid_score_records = batches.records(self.batches, ["score"])
        # A searched entry's cells come in rounds (mmspec.search): those of the rounds proposed
        # so far are batched here like the grid's; a round proposed during the run joins the
        # DAG when its checkpoint (search.smk) has written it.
        self.rounds = search_rounds.Rounds(config, self.cells.values(), batch_of)
        for proposed in self.rounds.proposed(fresh=True):
            for stage, table in proposed.batches.items():
                self.batches[stage].update(table)
        # Every output of the sweep is a target of the run: Snakemake rebuilds a missing file
        # only for a target or for a job that must run, so an upstream output deleted under an
        # up-to-date summary would otherwise stay missing while the report counted it. A
        # search's corner cells stand for the upstream outputs its rounds' cells read.
        corners = search_runs.corner_cells(config)
        self.outputs = [
            *cell_inputs.upstream_outputs(config, [*self.cells.values(), *corners]),
            *batches.records(self.batches),
        ]
        self._codes = {stage: fingerprint(stage) for stage in (*MODEL_STAGES, "prepare")}
        self._codes["train_drafter"] = fingerprint("train_drafter")

    def heal(self) -> list[str]:
        """Before the DAG is planned (by the run that plans it, not its jobs on cluster nodes):
        a damaged output is set aside, and so rebuilt like a missing one (with what depends on
        it); a batch record whose cells' outputs were since deleted or changed is removed, so
        that the batch runs again. The lines saying which records went."""
        integrity.set_aside_damaged(self.outputs)
        return list(batches.stale_records(self.batches))

    def before_jobs(self, local_exec: bool, configfiles: list[str]) -> None:
        """Once the executor is known, before any job (a dry run runs none of this): refuse a
        judge that jobs on compute nodes cannot reach (scoring.judge.reach) and a hub cache
        lacking what offline jobs read (planning.hub_needs), each a ValueError saying what to
        do; then write the batches' specs and the searches' sweep file."""
        judged = config_checks.judged_datasets(self.config, list(self.cells.values()))
        if judged:
            try:
                judge_reach.check_reachable(self.config["judge"]["endpoint"], judged, local_exec)
            except ValueError as error:
                raise ValueError(f"invalid configuration: {error}") from None
        configs = " ".join(configfiles) or "config/config.yaml"
        hub_needs.before_jobs(self.config, list(self.cells.values()), local_exec, configs)
        batches.write_specs(self.batches)
        search_rounds.write_sweep(self.config, self.rounds.runs)

    # ---- prepare
    def dataset_inputs(self, dataset: str) -> list[str]:
        """The local files a dataset's source prepares it from (none for hub and toy ones)."""
        entry = self.config["datasets"][dataset]
        return dataset_source.of(entry).inputs(dataset, entry)

    def prepare_spec(self, dataset: str) -> str:
        """The dataset's config entry as the prepare job reads it (JSON)."""
        entry = mmconfig.prepare_entry(self.config["datasets"][dataset])
        return json.dumps(entry, sort_keys=True)

    def prepare_code(self, dataset: str) -> str:
        """The prepare stage's code fingerprint, with the dataset's source when a plugin adds
        it."""
        return self._codes["prepare"] + dataset_source.plugin_code(self.config["datasets"][dataset])

    # ---- toy models
    def toy_recipe(self, name: str) -> str:
        """A toy model's recipe as its toy_model job reads it (JSON)."""
        return json.dumps(self.toy_models[name], sort_keys=True)

    # ---- models: visual caches, captions
    def model_code(self, stage: str, refs: list[str]) -> str:
        """`stage`'s code fingerprint, with the plugin sources of the models `refs`."""
        return self._codes[stage] + model_source.plugin_code(refs)

    def model_output(self, ref: str):
        """The workflow output a model reference needs (a toy model's folder), if any."""
        return cell_inputs.model_output(ref)

    def model_memory(self, model: str) -> footprint.JobMemory:
        """The memory a job loading the sweep's model `model` (its slug) requests."""
        return footprint.job_memory([self.models[model]], self.toy_models)

    def captioner_spec(self) -> str:
        return Captioner.parse(self.captioner).to_json()

    def captioner_memory(self) -> footprint.JobMemory:
        captioner = (self.captioner["model"], self.captioner["dtype"])
        return footprint.job_memory([captioner], self.toy_models)

    # ---- trained heads
    def head_cell(self, pair: str, kind: str, hp: str) -> mmcells.Cell:
        """A cell drafting with the head of `pair`, `kind` and training values `hp`."""
        return self.head_cells[f"results/drafters/{pair}/{kind}/{hp}"]

    def train_drafter_inputs(self, pair: str, kind: str, hp: str) -> dict:
        """A head trains on its `head_data` dataset, answered by the pair's target."""
        return cell_inputs.head_inputs(self.config, self.head_cell(pair, kind, hp))

    def train_drafter_params(self, pair: str, kind: str, hp: str) -> str:
        """The head's job (sweep.jobs.TrainDrafterJob), as the JSON its stage reads."""
        cell = self.head_cell(pair, kind, hp)
        task = config_checks.dataset_task(self.config, cell.spec.head_training()["head_data"])
        return TrainDrafterJob.of_cell(self.config, cell, task).to_json()

    def train_drafter_code(self, pair: str, kind: str, hp: str) -> str:
        """The train_drafter code fingerprint, with the plugins of the head's drafter and of
        the target's model source."""
        cell = self.head_cell(pair, kind, hp)
        target = self.config["pairs"][cell.pair]["target"]
        code = self._codes["train_drafter"]
        return code + cell.spec.plugin_code() + model_source.plugin_code([target])

    def target_memory(self, pair: str) -> footprint.JobMemory:
        """The memory a job loading `pair`'s target requests."""
        found = self.config["pairs"][pair]
        return footprint.job_memory([(found["target"], found["dtype"])], self.toy_models)

    # ---- batches of the per-cell stages
    def batch(self, stage: str, batch_id: str) -> batches.Batch:
        """A batch of `stage`: the grid's, or one of a round proposed during this run (whose
        spec is written here, as its cells join the DAG: a dry run proposes no round)."""
        found = self.batches[stage].get(batch_id)
        if found is None:
            found = self.rounds.batch(stage, batch_id)
            batches.write_specs({stage: {batch_id: found}})
            self.batches[stage][batch_id] = found
        return found

    # ---- searches
    def search_round_key(self, search: str) -> str:
        """What decides a round's points besides its history (its inputs) and its size (a
        param of its own): the search as defined (not its budget: a larger budget only adds
        rounds), the sweep's seeds and temperature."""
        key = {
            "search": self.rounds.runs[search].search.definition(),
            "seeds": self.config["seeds"],
            "temperature": self.config["generation"]["temperature"],
        }
        return json.dumps(key, sort_keys=True)

    def search_round_size(self, search: str, number: int) -> int:
        return self.rounds.runs[search].search.round_size(number)

    def sweep_json(self) -> str:
        """The validated config, as aggregate and report read it (JSON)."""
        return json.dumps(self.config, sort_keys=True)
