"""`--config` overrides (strings where the schema expects numbers) and local model paths."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from workflow_cli import cell_job_counts, planned_cells, snakemake_cmd
from workflow_cli import job_counts as batch_job_counts

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep import config_values

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"
MODEL_WILDCARD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # workflow/rules/common.smk


def dry_run(workdir: Path, configfile: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = snakemake_cmd(workdir, configfile, "--dry-run", "--printshellcmds")
    if overrides:
        cmd += ["--config", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def job_counts(out: subprocess.CompletedProcess, workdir: Path, config) -> dict[str, int]:
    """Rule -> jobs of a dry run in `workdir` of `config`, the per-cell stages counted in cells."""
    assert out.returncode == 0, out.stderr[-3000:]
    return cell_job_counts(out.stdout + out.stderr, workdir, config)


def generate_params(out: subprocess.CompletedProcess, workdir: Path, config) -> list[dict]:
    """The --params JSON of every cell a dry run in `workdir` of `config` plans to decode."""
    jobs = planned_cells(out.stdout + out.stderr, workdir, config).get("generate", [])
    return [json.loads(job.argv[job.argv.index("--params") + 1]) for job in jobs]


# ---------------------------------------------------------------------------------------------
# coerce(): strings read as the type the schema expects at their path


SCALARS = {
    "type": "object",
    "properties": {
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "z": {"type": "null"},
        "s": {"type": "string"},
        "maybe": {"type": ["integer", "null"]},
        "either": {"type": ["string", "null"]},
    },
}


@pytest.mark.parametrize(
    "key, text, expected",
    [
        ("i", "16", 16),
        ("i", "-3", -3),
        ("n", "0.5", 0.5),
        ("n", "16", 16),
        ("n", "1e-3", 0.001),
        ("n", ".5", 0.5),
        ("b", "true", True),
        ("b", "False", False),
        ("z", "null", None),
        ("z", "~", None),
        ("maybe", "7", 7),
        ("maybe", "~", None),
    ],
)
def test_each_type_is_read_from_its_exact_rendering(key, text, expected):
    got = config_values.coerce({key: text}, SCALARS)[key]
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "key, text",
    [
        ("i", "16.0"),  # a float's rendering, not an integer's
        ("i", "010"),  # YAML 1.1 reads octal; ambiguous, left for the schema to reject
        ("i", "sixteen"),
        ("n", "nan"),
        ("n", "1_000"),
        ("b", "yes"),
        ("b", "1"),
        ("z", "none"),
        ("s", "16"),  # a string is expected: left alone
        ("either", "null"),  # a string is allowed
    ],
)
def test_strings_that_render_no_expected_value_are_left_alone(key, text):
    assert config_values.coerce({key: text}, SCALARS) == {key: text}


def test_values_of_the_right_type_and_unknown_keys_are_untouched():
    value = {"i": 3, "n": 0.25, "b": True, "s": "x", "other": "16"}
    assert config_values.coerce(value, SCALARS) == value
    original = {"i": "3"}
    assert config_values.coerce(original, SCALARS) == {"i": 3}
    assert original == {"i": "3"}  # a new structure, the input is not modified


def test_nested_lists_refs_and_pattern_properties():
    path = {"type": "array", "items": {"type": "integer"}}
    schema = {
        "$defs": {"tree": {"type": "array", "items": path}},
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/tree"}},
        "patternProperties": {"^n_": {"type": "number"}},
        "additionalProperties": {"type": "boolean"},
    }
    value = {"tree": [["0"], ["1", "0"]], "n_keep": "0.5", "flag": "true", "n_x": "abc"}
    assert config_values.coerce(value, schema) == {
        "tree": [[0], [1, 0]],
        "n_keep": 0.5,
        "flag": True,
        "n_x": "abc",
    }


def test_one_of_takes_the_branch_the_value_then_satisfies():
    schema = {"oneOf": [{"const": "all"}, {"type": "array", "items": {"type": "integer"}}]}
    assert config_values.coerce("all", schema) == "all"
    assert config_values.coerce(["1", "2"], schema) == [1, 2]
    datasets = config_values.coerce(
        {
            "datasets": {
                "toy_vqa": {"source": "toy", "samples": "4", "seed": "1"},
                "hub": {
                    "source": "hf",
                    "id": "org/data",
                    "split": "test",
                    "limit": "5",
                    "columns": {"question": "q", "answer": "a"},
                },
            }
        }
    )["datasets"]
    assert datasets["toy_vqa"] == {"source": "toy", "samples": 4, "seed": 1}
    assert datasets["hub"]["limit"] == 5 and datasets["hub"]["split"] == "test"


def test_any_of_keeps_a_string_that_a_branch_already_accepts():
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert config_values.coerce("16", schema) == "16"
    assert config_values.coerce("16", {"anyOf": [{"type": "boolean"}, {"type": "integer"}]}) == 16


def test_one_of_that_fails_keeps_the_coercion_of_the_closest_branch():
    """The error then names what is really wrong (seed), not samples' string."""
    cfg = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    cfg["datasets"]["toy_caption"] = {"source": "toy", "samples": "4", "seed": "one"}
    with pytest.raises(mmconfig.ConfigError, match=r"datasets.toy_caption.seed: 'one' is not"):
        mmconfig.validate(cfg)


def test_method_hyperparameters_grids_and_trees_are_read_as_the_registry_types():
    methods = config_values.coerce(
        {
            "methods": {
                "sd": {"gamma": ["3", "5"], "views": ["M", "T"], "acceptance": "greedy"},
                "mine": {"method": "sd", "views": "U", "keep": "0.5", "temperature": "0"},
                "tree": {"method": "sd", "tree": "static", "paths": [["0"], ["1"], ["0", "0"]]},
                "trees": {
                    "method": "sd",
                    "tree": "static",
                    "paths": [[["0"]], [["0"], ["0", "1"]]],
                },
                "sage": {"sage_low": "2.5", "sage_d_max": "4"},
            }
        }
    )["methods"]
    assert methods["sd"] == {"gamma": [3, 5], "views": ["M", "T"], "acceptance": "greedy"}
    assert methods["mine"] == {"method": "sd", "views": "U", "keep": 0.5, "temperature": 0}
    assert methods["tree"]["paths"] == [[0], [1], [0, 0]]
    assert methods["trees"]["paths"] == [[[0]], [[0], [0, 1]]]
    assert methods["sage"] == {"sage_low": 2.5, "sage_d_max": 4}


def test_device_map_devices_are_gpu_indices():
    pairs = config_values.coerce(
        {"pairs": {"p": {"target": "org/m", "target_device_map": {"": "0", "lm_head": "cuda:1"}}}}
    )["pairs"]
    assert pairs["p"]["target_device_map"] == {"": 0, "lm_head": "cuda:1"}
    auto = config_values.coerce({"pairs": {"p": {"target": "org/m", "target_device_map": "auto"}}})
    assert auto["pairs"]["p"]["target_device_map"] == "auto"


@pytest.mark.parametrize(
    "path",
    [
        "config/config.yaml",
        "tests/configs/tiny.yaml",
        "config/presets/sage.yaml",
        "config/presets/specvlm.yaml",
    ],
)
def test_a_config_read_with_every_scalar_a_string_validates_as_the_typed_one(path):
    """BaseLoader is what Snakemake reads --config mappings with: every scalar a string."""
    text = (ROOT / path).read_text()
    strings = yaml.load(text, Loader=yaml.BaseLoader)
    assert mmconfig.validate(strings) == mmconfig.validate(yaml.safe_load(text))


# ---------------------------------------------------------------------------------------------
# Snakemake: --config overrides plan the cells they describe


def test_config_overrides_with_nested_numbers_plan_their_cells(tmp_path):
    out = dry_run(
        tmp_path,
        TINY,
        "generation={max_new_tokens: 16}",
        "seeds=[0,1]",
        "timing={threads: 2}",
        "methods={sd: {gamma: [3, 5]}, mine: {method: sd, views: U, keep: 0.5}}",
    )
    # the same overrides typed, merged into the config file as Snakemake merges mappings
    expected = yaml.safe_load(TINY.read_text())
    expected["generation"]["max_new_tokens"] = 16
    expected["seeds"] = [0, 1]
    expected["timing"]["threads"] = 2
    expected["methods"]["sd"]["gamma"] = [3, 5]
    expected["methods"]["mine"] = {"method": "sd", "views": "U", "keep": 0.5}
    expected = mmconfig.validate(expected)
    cells = mmcells.cells(expected)
    jobs = job_counts(out, tmp_path, expected)
    # per seed: ar, sd (M, T) x gamma (3, 5), tabed_mtcp, sage, lvspec, mine
    assert jobs["generate"] == jobs["score"] == jobs["judge"] == len(cells) == 18
    params = generate_params(out, tmp_path, expected)
    assert len(params) == len(cells)
    assert {p["generation"]["max_new_tokens"] for p in params} == {16}
    assert {p["timing"]["threads"] for p in params} == {2}
    assert {p["cell"]["seed"] for p in params} == {0, 1}
    sd = {
        (p["cell"]["spec"]["views"], p["cell"]["spec"]["gamma"])
        for p in params
        if p["cell"]["method"] == "sd"
    }
    assert sd == {(v, g) for v in "MT" for g in (3, 5)}
    mine = [p["cell"]["spec"] for p in params if p["cell"]["method"] == "mine"]
    assert len(mine) == 2 and all(s["keep"] == 0.5 and s["views"] == "U" for s in mine)


def test_a_bad_override_fails_naming_the_key_before_any_job(tmp_path):
    out = dry_run(tmp_path, TINY, "generation={max_new_tokens: sixteen}")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "config key generation.max_new_tokens: 'sixteen' is not of type 'integer'" in text
    assert "Job stats:" not in out.stdout + out.stderr


# ---------------------------------------------------------------------------------------------
# Adding to a sweep: `sweep_extra`'s named rows merge as every mapping of a config does

TOUR = ROOT / "config" / "config.yaml"
ADDITION = {
    "methods": {"sd_chain3": {"method": "sd_chain", "gamma": 3}},
    "sweep_extra": {
        "mine": {"datasets": ["toy_caption"], "pairs": ["toy_vdraft"], "methods": ["sd_chain3"]}
    },
}


def _paths(cells) -> list[str]:
    return [c.path for c in cells]


def test_a_file_adds_a_row_to_the_default_sweep_without_copying_it(tmp_path):
    addition = tmp_path / "mine.yaml"
    addition.write_text(yaml.safe_dump(ADDITION))
    tour = _paths(mmcells.cells(mmconfig.load(TOUR)))
    added = _paths(mmcells.cells(mmconfig.load_as_snakemake(addition, TOUR)))
    new = "dataset=toy_caption/pair=toy_vdraft/method=sd_chain3/hp=gamma-3/seed=0"
    assert added == tour + [new]

    # Snakemake merges the file the same way: the tour's jobs and the one cell more
    out = dry_run(tmp_path / "run", addition)
    assert job_counts(out, tmp_path / "run", [addition])["generate"] == len(tour) + 1
    assert "method=sd_chain3" in out.stdout + out.stderr


def test_extra_rows_of_several_files_add_up_merge_by_name_and_null_drops_one(tmp_path):
    """A preset and the researcher's own rows: `mmspec cells preset.yaml mine.yaml` reads them
    as `snakemake --configfile preset.yaml mine.yaml` does; the preset's own sweep (a list,
    which replaces the tour's) stays whole."""
    preset = ROOT / "config" / "presets" / "toy_tabed.yaml"
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(
        yaml.safe_dump(
            {
                "methods": {"sd_chain9": {"method": "sd_chain", "gamma": 9}},
                "sweep_extra": {
                    "long": {
                        "datasets": ["toy_caption"],
                        "pairs": ["toy"],
                        "methods": ["sd_chain9"],
                    },
                    "weak": {"datasets": ["toy_caption"], "pairs": ["toy_weak"], "methods": ["mt"]},
                },
            }
        )
    )
    second.write_text(
        yaml.safe_dump({"sweep_extra": {"long": {"datasets": ["toy_story"]}, "weak": None}})
    )
    alone = _paths(mmcells.cells(mmconfig.load_as_snakemake(preset)))
    once = _paths(mmcells.cells(mmconfig.load_as_snakemake([preset, first])))
    assert once == alone + [
        "dataset=toy_caption/pair=toy/method=sd_chain9/hp=gamma-9/seed=0",
        "dataset=toy_caption/pair=toy_weak/method=mt/hp=default/seed=0",
    ]
    both = _paths(mmcells.cells(mmconfig.load_as_snakemake([preset, first, second])))
    assert both == alone + ["dataset=toy_story/pair=toy/method=sd_chain9/hp=gamma-9/seed=0"]


def test_bad_extra_rows_are_named_before_any_job(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_text(yaml.safe_dump({"sweep_extra": {}}))
    with pytest.raises(mmconfig.ConfigError, match="config key sweep_extra: an empty mapping"):
        mmconfig.load_as_snakemake(path, TOUR)
    path.write_text(
        yaml.safe_dump({"sweep_extra": {"mine": {"datasets": ["nope"], "pairs": "all"}}})
    )
    with pytest.raises(
        mmconfig.ConfigError, match="sweep_extra.mine.datasets: unknown name 'nope'"
    ):
        mmconfig.load_as_snakemake(path, TOUR)
    path.write_text(yaml.safe_dump({"sweep_extra": [{"datasets": "all", "pairs": "all"}]}))
    with pytest.raises(
        mmconfig.ConfigError, match="config key sweep_extra: .* is not of type 'object'"
    ):
        mmconfig.load_as_snakemake(path, TOUR)


# ---------------------------------------------------------------------------------------------
# Local model paths


def _write_model(folder: Path) -> None:
    """A folder the config check reads as a LLaVA model (its config.json is all it reads)."""
    import transformers

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(transformers.LlavaConfig().to_dict()))


def _pair_config(path: Path, target: str, captioner: str | None = None) -> dict:
    cfg = {
        "datasets": {"toy_caption": {"source": "toy", "samples": 2}},
        "pairs": {"p": {"target": target}},
        "methods": {"ar": {}},
    }
    if captioner:
        cfg["captioner"] = {"model": captioner}
    path.write_text(yaml.safe_dump(cfg))
    return cfg


def test_a_dot_slash_model_path_plans_exactly_as_the_plain_path(tmp_path):
    _write_model(tmp_path / "models" / "tgt")
    plans = {}
    for target in ("./models/tgt", "models/tgt", "models/tgt/"):
        _pair_config(tmp_path / "c.yaml", target)
        out = dry_run(tmp_path, tmp_path / "c.yaml")
        assert out.returncode == 0, out.stderr[-3000:]
        jobs = batch_job_counts(out.stdout + out.stderr)  # the cell's batch: one job per stage
        commands = re.findall(r"mmspec \w+ .*$", out.stdout + out.stderr, re.M)
        plans[target] = (jobs, sorted(commands))
    assert plans["./models/tgt"] == plans["models/tgt"] == plans["models/tgt/"]
    jobs, commands = plans["./models/tgt"]
    assert jobs["cache_visual"] == jobs["generate"] == 1
    visual = f"results/visual/{mmcells.model_slug('models/tgt')}/toy_caption.parquet"
    assert any("--model models/tgt " in c and visual in c for c in commands)


def test_a_missing_local_model_fails_naming_pair_role_and_path(tmp_path):
    _pair_config(tmp_path / "c.yaml", "./models/nope")
    out = dry_run(tmp_path, tmp_path / "c.yaml")
    assert out.returncode != 0
    assert (
        "config key pairs.p.target: pair 'p', role target: local model path './models/nope' "
        "does not exist" in out.stdout + out.stderr
    )
    assert "Job stats:" not in out.stdout + out.stderr


@pytest.mark.parametrize(
    "ref",
    [
        "./nope",
        "../nope",
        "/nonexistent/mmspec/model",
        "~/nonexistent-mmspec-model",
        "models/sub/nope",
        "nope",
        "org/na--me",
        "org/.name",
    ],
)
def test_references_that_can_only_be_missing_local_paths_are_rejected(ref, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _pair_config(tmp_path / "c.yaml", ref)
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(cfg)
    assert f"config key pairs.p.target: pair 'p', role target: local model path {ref!r}" in str(
        error.value
    )
    draft = dict(cfg, pairs={"p": {"target": "org/model", "draft": ref}})
    with pytest.raises(mmconfig.ConfigError, match="pairs.p.draft: pair 'p', role draft"):
        mmconfig.validate(draft)
    captioner = _pair_config(tmp_path / "c.yaml", "org/model", captioner=ref)
    with pytest.raises(mmconfig.ConfigError, match="captioner.model: the captioner"):
        mmconfig.validate(captioner)


def test_hub_ids_that_are_not_cached_still_validate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    cfg = _pair_config(
        tmp_path / "c.yaml",
        "some-org/not-cached.v1.5",
        captioner="florence-community/Florence-2-large-ft",
    )
    got = mmconfig.validate(cfg)
    assert got["pairs"]["p"]["target"] == "some-org/not-cached.v1.5"
    assert got["captioner"]["model"] == "florence-community/Florence-2-large-ft"


def test_a_file_is_no_model_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_text("")
    with pytest.raises(mmconfig.ConfigError, match="pairs.p.target: .*'./weights.bin' is a file"):
        mmconfig.validate(_pair_config(tmp_path / "c.yaml", "./weights.bin"))


def test_local_paths_are_normalised_and_their_slugs_fit_the_model_wildcard(tmp_path, monkeypatch):
    work = tmp_path / "work"
    _write_model(work / "models" / "tgt")
    _write_model(tmp_path / "up")
    monkeypatch.chdir(work)
    got = mmconfig.validate(_pair_config(work / "c.yaml", "./models/tgt"))
    assert got["pairs"]["p"]["target"] == "models/tgt"
    got = mmconfig.validate(_pair_config(work / "c.yaml", "../up"))
    assert got["pairs"]["p"]["target"] == "../up"
    assert mmcells.model_slug("./models/tgt") == mmcells.model_slug("models/tgt")
    for ref in ("../up", "./models/tgt", "/abs/model", "~/m", "_org/model", "llava-hf/llava"):
        assert MODEL_WILDCARD.fullmatch(mmcells.model_slug(ref)), ref
    assert mmcells.model_slug("../up") != mmcells.model_slug("up")
