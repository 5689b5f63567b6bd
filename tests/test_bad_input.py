"""Values that pass a naive check and then fail or run wrongly (issue 12, item 8): each is
rejected before any job, naming the key, or read the way the workflow reads it."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from base_config import base_config

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig

ROOT = Path(__file__).resolve().parents[1]

BASE = base_config(methods={"ar": {}, "sd": {"views": "M", "gamma": 5}})


def changed(**sections) -> dict:
    cfg = copy.deepcopy(BASE)
    cfg.update(copy.deepcopy(sections))
    return cfg


# 1. a negative per-method temperature


@pytest.mark.parametrize(
    "entry",
    [
        {"temperature": -1},
        {"temperature": -0.5, "acceptance": "sampling"},
        {"temperature": [0.0, -1.0]},  # one point of a grid
        {"temperature": "-1"},  # a --config override's string
    ],
)
def test_negative_method_temperature_is_rejected_naming_key_and_range(entry):
    cfg = changed(methods={"ar": {}, "sd": entry})
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(cfg)
    message = str(error.value)
    assert "methods.sd" in message and "temperature must be >= 0" in message
    assert "add `ar" not in message


def test_negative_generation_temperature_is_rejected():
    with pytest.raises(mmconfig.ConfigError, match=r"generation.temperature: -1 is less than"):
        mmconfig.validate(changed(generation={"temperature": -1}))


# 2. `drafter: none` on a drafting method (it would decode as AR under views M, gamma 5)


@pytest.mark.parametrize("value", ["none", None])
def test_drafter_none_on_a_drafting_method_is_rejected(value):
    cfg = changed(methods={"ar": {}, "sd": {"views": "M", "gamma": 5, "drafter": value}})
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(cfg)
    message = str(error.value)
    assert "methods.sd" in message and "drafter=" in message
    assert "method: ar" in message  # says how to run AR instead


def test_drafter_equal_to_the_methods_own_is_accepted_and_others_rejected():
    ok = mmconfig.validate(changed(methods={"ar": {"drafter": "none"}, "sd": {"drafter": "model"}}))
    drafters = {c.method: c.spec.drafter for c in mmcells.cells(ok)}
    assert drafters == {"ar": "none", "sd": "model"}
    with pytest.raises(mmconfig.ConfigError, match="methods.ar: drafter='model'"):
        mmconfig.validate(changed(methods={"ar": {"drafter": "model"}}))


# 3. an unknown toy scenario (a toy dataset's name is its scenario)


def test_unknown_toy_scenario_is_rejected_with_the_known_names():
    cfg = changed(datasets={"toy_foo": {"source": "toy", "samples": 4}})
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(cfg)
    message = str(error.value)
    assert "datasets.toy_foo" in message and "unknown toy scenario 'toy_foo'" in message
    assert "toy_caption" in message and "toy_video" in message  # the known names


def test_a_toy_dataset_without_the_toy_prefix_is_rejected_too():
    with pytest.raises(mmconfig.ConfigError, match="datasets.caption: unknown toy scenario"):
        mmconfig.validate(changed(datasets={"caption": {"source": "toy"}}))


def test_unknown_scenario_of_a_toy_model_is_rejected():
    cfg = changed()
    cfg["toy"]["models"]["draft"]["text_scenarios"] = ["toy_diff", "toy_dif"]
    with pytest.raises(
        mmconfig.ConfigError,
        match=r"toy.models.draft.text_scenarios: unknown "
        r"toy scenario 'toy_dif'; known: \['toy_caption'",
    ):
        mmconfig.validate(cfg)


# 4. an empty sweep, and an empty methods override


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("sweep", [], "config key sweep: empty"),
        ("methods", {}, "config key methods: empty"),
        ("seeds", [], "config key seeds: empty"),
    ],
)
def test_empty_sweep_methods_or_seeds_are_rejected(key, value, expected):
    with pytest.raises(mmconfig.ConfigError, match=expected) as error:
        mmconfig.validate(changed(**{key: value}))
    assert "no cells" in str(error.value)


def test_an_empty_methods_override_is_rejected_not_ignored():
    with pytest.raises(mmconfig.ConfigError, match="config key methods: an empty mapping given"):
        mmconfig.validate(changed(), overrides={"methods": {}})
    mmconfig.validate(changed(), overrides={"methods": {"sd": {}}})  # a no-op entry is fine


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--config", "methods={}"], "config key methods: an empty mapping given"),
        (["--config", "sweep=[]"], "config key sweep: empty"),
        (["--configfile", "PARTIAL"], "config key methods: an empty mapping given"),
    ],
)
def test_snakemake_rejects_empty_overrides(tmp_path, args, expected):
    (tmp_path / "config").mkdir()  # the default sweep, which the overrides merge into
    (tmp_path / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    partial = tmp_path / "partial.yaml"
    partial.write_text("methods: {}\n")
    args = [str(partial) if a == "PARTIAL" else a for a in args]
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--dry-run",
        "--cores",
        "1",
        "--directory",
        str(tmp_path),
        *args,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert expected in out.stdout + out.stderr


# 5. `mmspec cells` reads a partial override file as Snakemake does


def cells_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mmspec.cli", "cells", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


def test_cells_merges_a_partial_file_over_the_default_sweep(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("generation: {max_new_tokens: 16}\nseeds: [0, 1]\n")
    out = cells_cli(str(partial))
    assert out.returncode == 0, out.stderr
    default = mmcells.cells(mmconfig.load(ROOT / "config" / "config.yaml"))
    listed = out.stdout.split()
    assert len(listed) == 2 * len(default)  # the default sweep's cells, at both seeds
    assert {c.path for c in default} <= set(listed)
    merged = mmconfig.load_as_snakemake(partial, ROOT / "config" / "config.yaml")
    expected = {"max_new_tokens": 16, "temperature": 0.0, "cfg": 3.0, "top_k": 0}
    assert merged["generation"] == expected
    assert merged["methods"] == mmconfig.load(ROOT / "config" / "config.yaml")["methods"]


def test_a_config_error_names_the_files_the_config_came_from(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("methods: {sd: {gamma: 0}}\n")
    out = cells_cli(str(partial))
    assert out.returncode != 0
    assert "methods.sd: gamma must be >= 1" in out.stderr
    assert f"(config from {partial}, config/config.yaml)" in out.stderr


def test_cells_reads_a_file_with_datasets_as_a_whole_sweep(tmp_path):
    whole = tmp_path / "whole.yaml"
    whole.write_text(
        "datasets: {toy_vqa: {source: toy, samples: 2}}\n"
        "pairs: {toy: {target: 'toy:target'}}\n"
        "toy: {models: {target: {hidden: 8, layers: 1, steps: 1}}}\n"
        "methods: {ar: {}}\n"
    )
    out = cells_cli(str(whole))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["dataset=toy_vqa/pair=toy/method=ar/hp=default/seed=0"]


def test_cells_help_says_how_a_partial_file_is_read():
    out = subprocess.run(
        [sys.executable, "-m", "mmspec.cli", "cells", "--help"], capture_output=True, text=True
    )
    assert "merged over" in " ".join(out.stdout.split())


def test_cells_partial_file_without_a_default_sweep_says_so(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("generation: {max_new_tokens: 16}\n")
    out = cells_cli(str(partial), cwd=tmp_path)
    assert out.returncode == 1
    assert "declares no `datasets`" in out.stderr and "config/config.yaml" in out.stderr


def test_cells_partial_file_with_empty_methods_is_rejected(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("methods: {}\n")
    out = cells_cli(str(partial))
    assert out.returncode == 1
    assert "config key methods: an empty mapping given" in out.stderr


# 6. malformed YAML names the file and line


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets:\n  toy_caption: {source: toy\npairs: {}\n")
    with pytest.raises(mmconfig.ConfigError, match=rf"{bad}:3:\d+: malformed YAML"):
        mmconfig.load(bad)
    out = cells_cli(str(bad))
    assert out.returncode == 1
    assert out.stderr.startswith(f"mmspec cells: error: {bad}:3:")
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_yaml_file_that_is_no_mapping_is_named(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(mmconfig.ConfigError, match=rf"{bad}: the file holds a list"):
        mmconfig.load(bad)


# 7. a corrupt intermediate Parquet file


@pytest.mark.parametrize("keep", [0, 7, 0.5])
def test_corrupt_parquet_names_the_file_and_is_set_aside_for_its_rebuild(tmp_path, keep):
    import pyarrow as pa

    from mmspec.storage import tables

    path = tmp_path / "results" / "prepared" / "toy caption.parquet"
    rows = {name: [] for name in tables.PREPARED.names}
    tables.write_table(pa.Table.from_pydict(rows, schema=tables.PREPARED), path, tables.PREPARED)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(tables.CorruptTableError) as error:
        tables.read_table(path, tables.PREPARED)
    message = str(error.value)
    assert "\n" not in message and f"{path}: corrupt or truncated Parquet" in message
    assert "moved aside to toy caption.parquet.damaged: rerun the same snakemake" in message
    # missing now, the workflow rebuilds it (every output is a target); its bytes are kept
    assert not path.exists()
    kept = int(len(data) * keep) if isinstance(keep, float) else keep
    assert path.with_name("toy caption.parquet.damaged").read_bytes() == data[:kept]


def test_bytes_changed_inside_a_table_fail_its_page_checksum(tmp_path):
    """A bit flipped in a data page can decode to other values without an error; the pages'
    checksums (written by every stage) make the reader refuse it instead."""
    import pyarrow.parquet as pq

    from mmspec.stages import prepare
    from mmspec.storage import tables

    path = tmp_path / "prepared.parquet"
    prepare.run("toy_caption", {"source": "toy", "samples": 3}, str(path), 0)
    whole = pq.read_table(path)
    data = path.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little")  # the schema and statistics: not in pages
    caught = 0
    for at in range(4, len(data) - 8 - footer, 37):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        path.write_bytes(flipped)
        try:
            silent = not pq.read_table(path).equals(whole)  # no checksums read: other values
        except OSError:
            continue  # the file's structure broke: any reader fails
        if silent:
            with pytest.raises(tables.CorruptTableError):
                tables.read_table(path, tables.PREPARED)
            caught += 1
    assert caught > 0


def test_corrupt_parquet_is_one_line_from_a_stage(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"PAR1 not really")
    cmd = [
        sys.executable,
        "-m",
        "mmspec.cli",
        "score",
        "--samples",
        str(bad),
        "--ar-samples",
        str(bad),
        "--prepared",
        str(bad),
        "--metric",
        "toy",
        "--out",
        str(tmp_path / "o"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        line for line in out.stderr.strip().splitlines() if line.startswith("mmspec score: error:")
    ]
    assert "moved aside to x.parquet.damaged: rerun the same snakemake command line" in out.stderr


def test_an_error_raised_outside_mmspec_keeps_its_type_and_place(tmp_path):
    """A KeyError in a plugin's own code is a bug to find, not bad input: its line says what it
    is and where it was raised; mmspec's own bad-input errors stay their message."""
    import importlib.util

    from mmspec.cli import one_line
    from mmspec.storage.tables import PREPARED, read_table

    helper = tmp_path / "plugin_helper_of_tests.py"
    helper.write_text("def counts(seen):\n    return seen[1051]\n")
    spec = importlib.util.spec_from_file_location("plugin_helper_of_tests", helper)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(KeyError) as error:
        module.counts({})
    assert one_line(error.value) == (
        f"KeyError: 1051 (raised at {helper}:2; MMSPEC_TRACEBACK=1 prints the traceback)"
    )
    with pytest.raises(FileNotFoundError) as error:
        read_table(tmp_path / "missing.parquet", PREPARED)
    assert (
        one_line(error.value)
        == f"{tmp_path / 'missing.parquet'}: no such file (has the stage that writes it run?)"
    )
