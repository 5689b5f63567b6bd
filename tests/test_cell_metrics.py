"""The cells metrics are declared once (mmspec.sweep.cell_metrics) and everything else follows: the
aggregate's query, the cells table's schema, the report's definitions, the claims' statistics and
the metrics reference. A metric declared here, and nowhere else, is computed by the aggregate
and shows up in each of them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmspec.claims import claim
from mmspec.cli import reference
from mmspec.report import page
from mmspec.stages import aggregate
from mmspec.storage.tables import SCORES, write_table
from mmspec.sweep import cell_metrics
from mmspec.sweep.cell_metrics import CELLS
from mmspec.workflow.fingerprint import PACKAGE

# A metric the package does not have: proposal nodes per verification step, from the score
# files' drafted_sum. It is added as a developer adds one: a declaration in cell_metrics.py's list,
# in a copy of the package, which a fresh process then imports instead of this one.
DECLARATION = """
    CellMetric(
        "drafted_per_step",
        pa.float64(),
        "sum(drafted_sum) / nullif(sum(steps), 0)",
        "proposal nodes per verification step",
        better="lower",
        definition="proposal nodes / steps, pooled over the cell.",
    ),
"""
PROBE = """
import json, sys
import mmspec
from mmspec.sweep import cell_metrics
from mmspec.cli import reference
from mmspec.report import page
from mmspec.stages import aggregate
package, scores, out = sys.argv[1:]
assert mmspec.__file__.startswith(package), mmspec.__file__  # the copy, not the installed one
aggregate.run([scores], out, out + ".blocks")
print(json.dumps({
    "sql": aggregate.CELLS_SQL,
    "schema": [[f.name, str(f.type)] for f in cell_metrics.CELLS],
    "definitions": dict(page.METRIC_DEFINITIONS),
    "html": page.render_definitions(),
    "reference": reference.metrics_page(),
}))
"""


def _with_declaration(folder: Path) -> Path:
    """A copy of the package whose CELL_METRICS ends with DECLARATION."""
    copy = folder / "src" / "mmspec"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = copy / "sweep" / "cell_metrics.py"
    head, tail = source.read_text().split("\nCELL_METRICS = [\n", 1)
    body, rest = tail.split("\n]\n", 1)
    source.write_text(f"{head}\nCELL_METRICS = [\n{body}{DECLARATION}]\n{rest}")
    return copy


def _score_file(path) -> str:
    """A drafting cell's score rows: (steps, new tokens, drafted) per sample-turn."""
    rows = [
        {
            "dataset": "toy_caption",
            "pair": "p",
            "method": "sd",
            "hp": "default",
            "hparams": "{}",
            "seed": 0,
            "registry_method": "sd",
            "sample_id": f"s{i}",
            "turn": 0,
            "steps": steps,
            "new_tokens": new,
            "accepted_sum": new - steps,
            "drafted_sum": drafted,
            "decode_s": 1.0,
        }
        for i, (steps, new, drafted) in enumerate([(4, 12, 20), (6, 10, 30), (10, 30, 40)])
    ]
    write_table(pa.Table.from_pylist(rows, schema=SCORES), path, SCORES)
    return str(path)


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    """What a process running the package with DECLARATION derives, and the cells table its
    aggregate wrote."""
    folder = tmp_path_factory.mktemp("probe")
    package = _with_declaration(folder)
    scores, out = _score_file(folder / "scores.parquet"), folder / "cells.parquet"
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(package), scores, str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout), pq.read_table(out)


def test_a_declared_metric_is_in_the_query_and_the_schema(declared):
    derived, _ = declared
    assert "sum(drafted_sum) / nullif(sum(steps), 0) AS drafted_per_step" in derived["sql"]
    names = [name for name, _ in derived["schema"]]
    assert names == [*CELLS.names[:-1], "drafted_per_step", "device"]
    assert derived["schema"][-2] == ["drafted_per_step", "double"]


def test_a_declared_metric_is_defined_in_the_report_and_the_reference(declared):
    derived, _ = declared
    text = "proposal nodes / steps, pooled over the cell."
    assert derived["definitions"]["drafted_per_step"] == text
    assert f"<dt>drafted_per_step</dt><dd>{text}</dd>" in derived["html"]
    assert f"## drafted_per_step\n\n{text}" in derived["reference"]
    row = "| [drafted_per_step](#drafted_per_step) | double | lower |  |"
    assert row + " `sum(drafted_sum) / nullif(sum(steps), 0)` |" in derived["reference"]


def test_the_aggregate_computes_a_declared_metric(declared):
    _, cells = declared
    (cell,) = cells.to_pylist()
    assert cell["drafted_per_step"] == pytest.approx(90 / 20)  # pooled, not a mean of ratios
    assert cell["tau"] == pytest.approx(52 / 20)
    assert cells.schema.names[-2:] == ["drafted_per_step", "device"]


def test_the_cells_schema_is_the_declarations_in_order():
    metrics = cell_metrics.fields()
    start = CELLS.names.index(metrics[0][0])
    assert [(f.name, f.type) for f in CELLS][start:-1] == metrics
    assert CELLS.names[-1] == "device"


def test_the_declarations_are_consistent():
    names = [m.name for m in cell_metrics.CELL_METRICS]
    assert len(names) == len(set(names))
    for m in cell_metrics.CELL_METRICS:
        assert set(m.interval or ()) <= set(names), m.name
        if m.definition:  # a heading names declared columns only
            assert set(m.heading.replace(" ", "").split(",")) <= set(names), m.heading
    headings = [term for term, _ in page.METRIC_DEFINITIONS]
    assert len(headings) == len(set(headings))
    with pytest.raises(ValueError, match="better"):
        cell_metrics.CellMetric("x", pa.float64(), None, "x", better="up")


def test_every_aggregated_metric_is_in_the_query():
    for m in cell_metrics.CELL_METRICS:
        if m.sql:
            assert f"{m.sql} AS {m.name}," in aggregate.CELLS_SQL


def test_the_definitions_come_from_the_declarations():
    definitions = dict(page.METRIC_DEFINITIONS)
    for m in cell_metrics.CELL_METRICS:
        if m.definition:
            assert definitions[m.heading] == m.definition
    assert cell_metrics.heading_of("real_divergences") == (
        "near_tie_divergences, real_divergences, device_differences"
    )
    assert cell_metrics.heading_of("judge_retention_high") == (
        "judge_score, judge_retention, judge_failures"
    )
    assert cell_metrics.heading_of("n_samples") is None


def test_the_claims_statistics_take_the_declared_direction_and_interval():
    for stat, (column, interval, higher) in claim.STATS.items():
        m = cell_metrics.metric(stat)
        assert (column, interval, higher) == (m.name, m.interval, m.better == "higher")
    assert claim.STATS["fid"] == ("fid", ("fid_low", "fid_high"), False)
    assert "accepted_mean" not in claim.STATS  # a direction, but no interval: cannot decide


def test_the_reference_tabulates_every_metric():
    page_text = reference.metrics_page()
    for m in cell_metrics.CELL_METRICS:
        assert f"| {m.name} |" in page_text or f"| [{m.name}](#" in page_text
    assert "| [steps](#steps) | int64 | lower |  | `sum(steps)` |" in page_text
